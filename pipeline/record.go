package pipeline

import "time"

// Source names where a line came from. For Kafka records Topic, Partition and
// Offset are the record's coordinates; for files Topic holds the file name and
// Offset the byte offset of the record. Line is the index of the line inside
// the record (a Fluent Bit record may carry several lines).
type Source struct {
	Topic     string
	Offset    int64
	Partition int32 // beside Line: 32 bytes, not 40 with the padding
	Line      int32
}

// Meta is the envelope metadata of a record: who logged it. Every field is
// optional; raw text lines carry none.
type Meta struct {
	Job       string
	Namespace string
	Pod       string
	Container string
	Node      string
	Cluster   string
	Labels    map[string]string
}

// Record is one decoded log line: the text with its envelope removed (but
// with any launcher prefix still in place), the event time the envelope gave,
// and the envelope metadata.
//
// Text and Stream may point into a decoder's internal buffer; they are valid
// until the decoder's next call unless the decoder's doc says otherwise.
type Record struct {
	Text   []byte
	Time   time.Time // zero when the envelope gave no time
	Stream string    // "stdout", "stderr" or ""
	Meta   *Meta     // nil when the envelope carried no metadata
	Source Source
}
