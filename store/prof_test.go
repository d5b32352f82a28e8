package store

import (
	"context"
	"path/filepath"
	"testing"
)

func BenchmarkTaskLifeParallel(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{Durability: DurableCommit})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := taskLife(context.Background(), s); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkTaskLifeSerial(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "b.db"), Options{Durability: DurableCommit})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for range b.N {
		if err := taskLife(context.Background(), s); err != nil {
			b.Fatal(err)
		}
	}
}

