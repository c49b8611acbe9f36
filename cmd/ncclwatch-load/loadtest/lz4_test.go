package loadtest

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	kafkalz4 "github.com/segmentio/kafka-go/compress/lz4"
)

// The harness's lz4 frames have librdkafka's frame descriptor (64 KiB
// independent blocks, no content checksum) and read back through
// kafka-go's own codec.
func TestFluentBitLZ4Frames(t *testing.T) {
	var src bytes.Buffer
	for i := 0; src.Len() < 300<<10; i++ {
		src.WriteString(`{"log":"node-3:2231:2390 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC","i":`)
		src.WriteString(string(rune('0' + i%10)))
		src.WriteString("}\n")
	}
	for round := range 2 { // the second writer comes from the pool
		var out bytes.Buffer
		w := (&fluentBitLZ4{}).NewWriter(&out)
		if _, err := w.Write(src.Bytes()); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f := out.Bytes()
		if got := binary.LittleEndian.Uint32(f); got != 0x184D2204 {
			t.Fatalf("round %d: magic %#x", round, got)
		}
		flg, bd := f[4], f[5]
		if flg>>6 != 1 || flg&(1<<5) == 0 || flg&(1<<2) != 0 || flg&(1<<4) != 0 {
			t.Errorf("round %d: FLG %08b, want version 1, independent blocks, no content or block checksum", round, flg)
		}
		if bd>>4&7 != 4 {
			t.Errorf("round %d: BD %08b, want block size id 4 (64 KiB)", round, bd)
		}
		r := (&kafkalz4.Codec{}).NewReader(bytes.NewReader(f))
		back, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(back, src.Bytes()) {
			t.Fatalf("round %d: read back %d bytes (%v), want %d", round, len(back), err, src.Len())
		}
	}
}
