package loadtest

import (
	"io"
	"sync"

	"github.com/pierrec/lz4/v4"
	"github.com/segmentio/kafka-go/compress"
	kafkalz4 "github.com/segmentio/kafka-go/compress/lz4"
)

// fluentBitLZ4 compresses record batches as librdkafka, the producer under
// Fluent Bit's Kafka output, does: LZ4 frames of independent 64 KiB blocks
// without a content checksum (rdkafka_lz4.c sets only the block mode and
// the level; every other frame preference keeps LZ4's default). kafka-go's
// own codec writes 4 MiB blocks with a content checksum, so a consumer of
// a stream it produced holds 4 MiB block buffers per reader and checks a
// checksum that no stream from Fluent Bit carries. The harness measures
// what users send, so its producers write the librdkafka form. Reading is
// kafka-go's: a frame says its own block size.
type fluentBitLZ4 struct{ kafkalz4.Codec }

var lz4Writers sync.Pool

// NewWriter returns a writer of librdkafka-shaped frames.
func (*fluentBitLZ4) NewWriter(w io.Writer) io.WriteCloser {
	z, _ := lz4Writers.Get().(*lz4.Writer)
	if z == nil {
		z = lz4.NewWriter(w)
	} else {
		z.Reset(w)
	}
	// Options are a frame's: set again after every Reset.
	if err := z.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false)); err != nil {
		panic(err) // constant, valid options on a writer not yet written to
	}
	return &lz4Writer{Writer: z}
}

type lz4Writer struct{ *lz4.Writer }

func (w *lz4Writer) Close() error {
	z := w.Writer
	if z == nil {
		return nil
	}
	w.Writer = nil
	err := z.Close()
	z.Reset(nil)
	lz4Writers.Put(z)
	return err
}

var installLZ4 sync.Once

// writeLZ4AsFluentBit makes every lz4 batch this process produces a
// librdkafka-shaped frame. kafka-go picks codecs from its global table,
// so the switch is process-wide: the load tool's producers are the only
// ones in its process.
func writeLZ4AsFluentBit() {
	installLZ4.Do(func() { compress.Codecs[compress.Lz4] = &fluentBitLZ4{} })
}
