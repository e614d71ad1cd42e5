package nethttp

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"
)

// countingReader counts the bytes its reader hands out.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// endless yields 'x' forever.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// pieces returns its data a few bytes per Read, as a chunked body arrives.
type pieces struct {
	data []byte
	size int
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), p.size)], p.data)
	p.data = p.data[n:]
	return n, nil
}

func TestReadLimited(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 100) // 1000 bytes
	tests := []struct {
		name    string
		r       func() io.Reader
		limit   int64
		want    []byte
		tooBig  bool
		wantErr error
	}{
		{"exactly the limit", func() io.Reader { return bytes.NewReader(data) }, 1000, data, false, nil},
		{"under the limit", func() io.Reader { return bytes.NewReader(data) }, 5000, data, false, nil},
		{"one byte over", func() io.Reader { return bytes.NewReader(data) }, 999, nil, true, nil},
		{"far over", func() io.Reader { return bytes.NewReader(data) }, 10, nil, true, nil},
		{"no limit (0)", func() io.Reader { return bytes.NewReader(data) }, 0, data, false, nil},
		{"no limit (negative)", func() io.Reader { return bytes.NewReader(data) }, -1, data, false, nil},
		{"max limit", func() io.Reader { return bytes.NewReader(data) }, math.MaxInt64, data, false, nil},
		{"empty", func() io.Reader { return strings.NewReader("") }, 10, []byte{}, false, nil},
		{"nil reader", func() io.Reader { return nil }, 10, []byte{}, false, nil},
		{"chunked pieces", func() io.Reader { return &pieces{data: data, size: 7} }, 1000, data, false, nil},
		{"chunked pieces over", func() io.Reader { return &pieces{data: data, size: 7} }, 999, nil, true, nil},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) }, 1000, data, false, nil},
		{"data with EOF", func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) }, 1000, data, false, nil},
		{"read error", func() io.Reader { return iotest.ErrReader(iotest.ErrTimeout) }, 1000, nil, false, iotest.ErrTimeout},
		{"read error without limit", func() io.Reader { return iotest.ErrReader(iotest.ErrTimeout) }, 0, nil, false, iotest.ErrTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readLimited(tt.r(), tt.limit, -1)
			switch {
			case tt.tooBig:
				if !errors.Is(err, errBodyTooLarge) {
					t.Fatalf("err = %v, want ErrBodyTooLarge", err)
				}
				if got != nil {
					t.Errorf("data returned with the error: %d bytes", len(got))
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) || got != nil {
					t.Fatalf("readLimited = %q, %v; want nil, %v", got, err, tt.wantErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, tt.want) {
					t.Errorf("readLimited = %d bytes, want %d", len(got), len(tt.want))
				}
			}
		})
	}
}

func TestReadLimitedEndless(t *testing.T) {
	for _, limit := range []int64{1, 511, 512, 513, 1 << 20} {
		cr := &countingReader{r: endless{}}
		_, err := readLimited(cr, limit, -1)
		if !errors.Is(err, errBodyTooLarge) {
			t.Fatalf("limit %d: err = %v, want ErrBodyTooLarge", limit, err)
		}
		if cr.n > limit+1 {
			t.Errorf("limit %d: read %d bytes, want at most %d", limit, cr.n, limit+1)
		}
	}
}

// TestReadLimitedSizeHint checks that the size hint changes nothing but the
// buffer: with a truthful, a too small, a too large and an unknown hint the
// body is read whole, the limit still holds, and a truthful hint costs one
// allocation.
func TestReadLimitedSizeHint(t *testing.T) {
	body := strings.Repeat("b", 10_000)
	for _, size := range []int64{-1, 0, 100, 10_000, 50_000} {
		got, err := readLimited(strings.NewReader(body), 1<<20, size)
		if err != nil || string(got) != body {
			t.Fatalf("size %d: read %d bytes, %v; want the whole body", size, len(got), err)
		}
		_, err = readLimited(strings.NewReader(body), 9_999, size)
		if !errors.Is(err, errBodyTooLarge) {
			t.Fatalf("size %d, limit 9999: %v; want ErrBodyTooLarge", size, err)
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		_, _ = readLimited(strings.NewReader(body), 1<<20, int64(len(body)))
	})
	if allocs > 2 { // the buffer, and the strings.Reader
		t.Fatalf("a truthful size hint cost %v allocations; want the buffer alone", allocs)
	}
}

// BenchmarkReadLimited reads a typical ~200 byte JSON request body of
// unknown length.
func BenchmarkReadLimited(b *testing.B) {
	body := []byte(`{"customer":"cus_9s6XKzkNRiz8i3","amount":1250,"currency":"eur","description":"Order #1234","metadata":{"order_id":"1234","channel":"web"},"capture":true,"items":[{"sku":"A-1","qty":2,"price":4.99}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	r := bytes.NewReader(body)
	for b.Loop() {
		r.Reset(body)
		if _, err := readLimited(r, 1<<20, -1); err != nil {
			b.Fatal(err)
		}
	}
}
