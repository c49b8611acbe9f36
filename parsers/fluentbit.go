package parsers

import (
	"encoding/json"
	"strconv"
	"time"
)

// FluentBitMeta is the Kubernetes metadata AppendFluentBit writes into a
// record.
type FluentBitMeta struct {
	Job, Namespace, Node, Pod, Container, Cluster string
}

// AppendFluentBit appends one Fluent Bit record of the shape
// deploy/fluent-bit produces (deploy/fluent-bit/README.md) holding line:
// the inverse of the decoder's "fluentbit" envelope. `replay` and the load
// generator write records with it.
func AppendFluentBit(dst, line []byte, t time.Time, m FluentBitMeta) []byte {
	dst = append(dst, `{"@timestamp":`...)
	dst = strconv.AppendFloat(dst, float64(t.UnixNano())/1e9, 'f', 6, 64)
	dst = append(dst, `,"log":`...)
	dst = appendJSONString(dst, string(line)+"\n")
	dst = append(dst, `,"stream":"stdout","time":"`...)
	dst = t.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","job":`...)
	dst = appendJSONString(dst, m.Job)
	if m.Cluster != "" {
		dst = append(dst, `,"cluster":`...)
		dst = appendJSONString(dst, m.Cluster)
	}
	dst = append(dst, `,"kubernetes":{"pod_name":`...)
	dst = appendJSONString(dst, m.Pod)
	dst = append(dst, `,"namespace_name":`...)
	dst = appendJSONString(dst, m.Namespace)
	dst = append(dst, `,"labels":{"training.kubeflow.org/job-name":`...)
	dst = appendJSONString(dst, m.Job)
	dst = append(dst, `},"host":`...)
	dst = appendJSONString(dst, m.Node)
	dst = append(dst, `,"container_name":`...)
	dst = appendJSONString(dst, m.Container)
	dst = append(dst, `}}`...)
	return dst
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // never fails for a string
	return append(dst, b...)
}
