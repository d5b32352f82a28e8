package files

import (
	"hash"
	"io"
)

// pipeBufs is how many bufSize buffers one hashing pipeline holds: one
// being filled, one being hashed, one queued between them.
const pipeBufs = 3

// hashPipe hashes in its own goroutine the buffers handed to it, so that
// reading (a TLS stream, a file) and writing overlap with SHA-256, the
// slowest stage of both the sender and the receiver, on a second core. It
// holds pipeBufs buffers of bufSize from bufPool: bytes never pile up
// beyond them.
type hashPipe struct {
	h    hash.Hash
	full chan pipeBuf
	free chan *[]byte
	bufs []*[]byte
	done chan struct{}
}

// pipeBuf is the first n bytes of a pool buffer.
type pipeBuf struct {
	bp *[]byte
	n  int
}

func newHashPipe(h hash.Hash) *hashPipe {
	p := &hashPipe{h: h, full: make(chan pipeBuf, pipeBufs), free: make(chan *[]byte, pipeBufs), done: make(chan struct{})}
	for range pipeBufs {
		bp := bufPool.Get().(*[]byte)
		p.bufs = append(p.bufs, bp)
		p.free <- bp
	}
	go func() {
		defer close(p.done)
		for b := range p.full {
			p.h.Write((*b.bp)[:b.n])
			p.free <- b.bp
		}
	}()
	return p
}

// next is a buffer free to fill (bufSize bytes long).
func (p *hashPipe) next() *[]byte { return <-p.free }

// submit hands the first n bytes of bp (from next) to the hasher and gives
// up bp; n == 0 just gives it back.
func (p *hashPipe) submit(bp *[]byte, n int) {
	if n == 0 {
		p.free <- bp
		return
	}
	p.full <- pipeBuf{bp, n}
}

// wait hashes everything submitted and returns the buffers to bufPool; h
// then holds every submitted byte, in order. Call it exactly once, after
// every buffer taken with next was submitted.
func (p *hashPipe) wait() {
	close(p.full)
	<-p.done
	for _, bp := range p.bufs {
		bufPool.Put(bp)
	}
}

// hashReader hashes r to its end through a hashPipe (reads of bufSize
// overlapping with hashing) and returns how many bytes it read.
func hashReader(h hash.Hash, r io.Reader) (int64, error) {
	p := newHashPipe(h)
	defer p.wait()
	var n int64
	for {
		bp := p.next()
		k, err := io.ReadFull(r, *bp)
		n += int64(k)
		p.submit(bp, k)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
