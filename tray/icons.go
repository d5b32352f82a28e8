package tray

import (
	"bytes"
	"image"
	"image/png"

	"golang.org/x/image/draw"

	"meshtray/assets"
)

// trayIconSize is the edge of the icons handed to the tray host: the
// StatusNotifierItem pixmap goes over D-Bus as raw ARGB (256 KiB at 256 px,
// 16 KiB at 64), and panels draw 16-48 px.
const trayIconSize = 64

// trayIcons returns the three tray icons scaled for the tray.
func trayIcons() map[iconState][]byte {
	return map[iconState][]byte{
		iconNormal:    scalePNG(assets.IconNormal, trayIconSize),
		iconPublished: scalePNG(assets.IconPublished, trayIconSize),
		iconApproval:  scalePNG(assets.IconApproval, trayIconSize),
	}
}

// scalePNG returns b scaled to size x size (Catmull-Rom), or b itself when
// it cannot be decoded.
func scalePNG(b []byte, size int) []byte {
	src, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		return b
	}
	dst := image.NewNRGBA(image.Rect(0, 0, size, size))
	draw.CatmullRom.Scale(dst, dst.Bounds(), src, src.Bounds(), draw.Src, nil)
	var out bytes.Buffer
	if err := png.Encode(&out, dst); err != nil {
		return b
	}
	return out.Bytes()
}
