package body

import "slices"

// bufferSizes are the sizes of a large body's buffer, from over
// MaxSmallBodyBytes to MaxBytes: MaxSmallBodyBytes times a power of two, or one
// and a half times one, so that a body's buffer is at most half as large
// again as the body. Fixed sizes let a buffer serve the next large body
// (Budget.buffers).
var bufferSizes = func() []int64 {
	var sizes []int64
	for size := int64(MaxSmallBodyBytes); size < MaxBytes; size *= 2 {
		sizes = append(sizes, min(size+size/2, MaxBytes), min(2*size, MaxBytes))
	}
	return slices.Compact(sizes)
}()

// bufferSize is the size of the buffer for a body of n bytes: the
// smallest of bufferSizes that holds it.
func bufferSize(n int64) int64 {
	i, _ := slices.BinarySearch(bufferSizes, n)
	return bufferSizes[i]
}

// buffer is an empty buffer of size, one of bufferSizes: a kept one if
// there is one. Its old bytes may be another review's Secret: Read fills
// every byte of a body before it returns it.
func (b *Budget) buffer(size int64) []byte {
	if kept, ok := b.buffers[slices.Index(bufferSizes, size)].Get().(*[]byte); ok {
		return (*kept)[:0]
	}
	return make([]byte, 0, size)
}

// release gives back a large body: the room it held, and its buffer for
// the next one. Nothing may use body after; nothing decoded from it does,
// as the UniversalDeserializer's decoders copy every string and byte slice
// they keep (docs/operations.md, "Memory").
func (b *Budget) release(body []byte) {
	size := int64(cap(body))
	b.free.release(size)
	body = body[:0]
	b.buffers[slices.Index(bufferSizes, size)].Put(&body)
}
