package body

import "slices"

// bufferSizes are the sizes of a large body's buffer, from over SmallBytes
// to MaxBytes: SmallBytes times a power of two, or one and a half times
// one. A full buffer can double (up to MaxBytes), so the room held stays
// within twice what has arrived, and a body's last buffer is at most half
// as large again as the body. Fixed sizes let a buffer serve the next
// large body (Reader.buffers).
var bufferSizes = func() []int64 {
	var sizes []int64
	for size := int64(SmallBytes); size < MaxBytes; size *= 2 {
		sizes = append(sizes, min(size+size/2, MaxBytes), min(2*size, MaxBytes))
	}
	return slices.Compact(sizes)
}()

// nextBufferSize is the size a full buffer of size full grows to, for a
// body of at most ceiling bytes: the smallest of bufferSizes that holds the
// ceiling, unless that is more than twice full; then the largest that is
// not.
func nextBufferSize(full, ceiling int64) int64 {
	next := full
	for _, size := range bufferSizes {
		if size > 2*full {
			break
		}
		next = size
		if size >= ceiling {
			break
		}
	}
	return next
}

// heldBytes is the room in the budget a body's buffer holds: all of it,
// for a large body's; a small body's buffer holds none.
func heldBytes(body []byte) int64 {
	if cap(body) > SmallBytes {
		return int64(cap(body))
	}
	return 0
}

// buffer is an empty buffer of size, one of bufferSizes: a recycled one if
// there is one. Its old bytes, which may be another review's Secret, are
// past its length: a body is only ever appended to or read into, so each
// of its bytes is written before it is read, and nothing may reslice a
// body past its length.
func (rd *Reader) buffer(size int64) []byte {
	if kept, ok := rd.buffers[slices.Index(bufferSizes, size)].Get().(*[]byte); ok {
		return (*kept)[:0]
	}
	return make([]byte, 0, size)
}

// recycle keeps a large body's buffer for the next one: nothing may use it
// after. A small body's is left to the GC.
func (rd *Reader) recycle(body []byte) {
	if heldBytes(body) > 0 {
		body = body[:0]
		rd.buffers[slices.Index(bufferSizes, int64(cap(body)))].Put(&body)
	}
}

// release gives back a body: the room it held, and its buffer for the
// next large body. Nothing may use body after; nothing decoded from it
// does, as the UniversalDeserializer's decoders copy what they keep,
// whatever the body's format: every string, and every byte slice
// (runtime.RawExtension's UnmarshalJSON and UnmarshalCBOR in
// k8s.io/apimachinery/pkg/runtime/extension.go append to their own; the
// generated protobuf code does the same).
func (rd *Reader) release(body []byte) {
	if held := heldBytes(body); held > 0 {
		rd.budget.release(held)
		rd.recycle(body)
	}
}
