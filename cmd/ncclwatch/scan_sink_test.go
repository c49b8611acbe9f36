package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// The batch scan hands its sink chain carries the stage's summaries as
// they are, unnamed process groups too and in order, and the scan sink
// gives back exactly those: the table and JSON document rest on it.
func TestScanSinkKeepsSummaryBatch(t *testing.T) {
	files, err := filepath.Glob("../../testdata/corpus/*.log")
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus: %v", err)
	}
	unnamed := 0
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s := newScanner(pipeline.Expectation{}, 64<<10, nil, false)
		err = s.read(path, f, 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		comms, sum, ok := s.stage.Summary(scanJob)
		b, bok := s.stage.SummaryBatch(scanJob)
		if ok != bok {
			t.Fatalf("%s: SummaryBatch ok = %v, Summary ok = %v", path, bok, ok)
		}
		if !ok {
			continue
		}
		if len(b.Unnamed) != 0 {
			t.Errorf("%s: the final batch holds %d unnamed groups apart from Comms", path, len(b.Unnamed))
		}
		for _, c := range comms {
			if !c.Named() {
				unnamed++
			}
		}
		sink, err := fileChain(nil, b, sum.LastSeen, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sink.comms, comms) || !reflect.DeepEqual(sink.sum, sum) {
			t.Errorf("%s: the scan sink's summaries differ from the stage's", path)
		}
		if sink.alerts != nil {
			t.Errorf("%s: alerts without rules = %v", path, sink.alerts)
		}
	}
	if unnamed == 0 {
		t.Error("no corpus file has an unnamed process group: the order check checks nothing")
	}
	if _, ok := newScanner(pipeline.Expectation{}, 64<<10, nil, false).stage.SummaryBatch(scanJob); ok {
		t.Error("SummaryBatch of an empty stage: ok")
	}
}
