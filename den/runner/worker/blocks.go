package worker

import (
	"io"
	"strings"
)

// blockSize is the unit of an in-memory output buffer.
const blockSize = 64 << 10

// blocks is an append-only byte buffer kept as fixed-size blocks. Unlike a
// bytes.Buffer it never doubles and copies as it grows, so holding up to the
// inline limit costs that much memory and no more, and handing it to GridFS
// frees it block by block.
type blocks struct {
	list [][]byte
	n    int
}

func (b *blocks) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 {
		if len(b.list) == 0 || len(b.list[len(b.list)-1]) == blockSize {
			b.list = append(b.list, make([]byte, 0, blockSize))
		}
		last := &b.list[len(b.list)-1]
		take := min(blockSize-len(*last), len(p))
		*last = append(*last, p[:take]...)
		p = p[take:]
	}
	b.n += written
	return written, nil
}

func (b *blocks) Len() int { return b.n }

// String returns the content as one string (one copy).
func (b *blocks) String() string {
	var s strings.Builder
	s.Grow(b.n)
	for _, blk := range b.list {
		s.Write(blk)
	}
	return s.String()
}

// drainTo writes the content to w and releases each block once written.
func (b *blocks) drainTo(w io.Writer) error {
	for i, blk := range b.list {
		b.list[i] = nil
		if _, err := w.Write(blk); err != nil {
			return err
		}
	}
	b.list, b.n = nil, 0
	return nil
}

// lastByte returns the final byte, and false when empty.
func (b *blocks) lastByte() (byte, bool) {
	if b.n == 0 {
		return 0, false
	}
	last := b.list[len(b.list)-1]
	return last[len(last)-1], true
}
