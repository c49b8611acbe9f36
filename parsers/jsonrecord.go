package parsers

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"time"
	"unicode/utf8"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// metaEntry is one cached *pipeline.Meta with the raw JSON it was built
// from, compared byte for byte on lookup.
type metaEntry struct {
	k8s, cluster, job []byte
	meta              *pipeline.Meta
}

// jsonString is a JSON string value: raw is the text between the quotes,
// esc says whether it holds escapes. ok is false when the key was absent
// or its value was not a string; set says the key was present.
type jsonString struct {
	raw     []byte
	esc     bool
	ok, set bool
}

// jsonTime is a time value: a string (RFC 3339) or a number (epoch seconds).
type jsonTime struct {
	raw []byte
	esc bool
	str bool
	ok  bool
}

// jsonFields holds what one scan of a top-level object found. Slices point
// into the record.
type jsonFields struct {
	log, message, stream, cluster, job, partial jsonString
	time, timestamp, date                       jsonTime
	k8s                                         []byte // raw "kubernetes" object, nil when absent
	notDocker                                   bool   // a key Docker's json-file never writes
	// k8sSlot is 1 + the Decoder.valid slot holding the bytes of k8s, 0
	// when none does; k8sGen is that entry's gen then.
	k8sSlot int
	k8sGen  uint32
}

// validEntry is a value of Decoder.valid: b, bytes found to be one valid
// JSON value; meta, the metadata entry built from them when they were a
// "kubernetes" object (nil until looked up); gen, which value stored
// there this is (Decoder.validGen), so that a slot refilled since a
// record named it is told apart.
type validEntry struct {
	b    []byte
	meta *metaEntry
	gen  uint32
}

// decodeJSON decodes a record that looks like JSON; data[i] is its first
// non-space byte. Anything but a JSON object with a string "log" or
// "message" is a *MalformedError.
func (d *Decoder) decodeJSON(data []byte, i int, emit func(*pipeline.Record)) error {
	d.last = EnvelopeRaw
	var hi bool
	d.ctl, hi = suspectBytes(data)
	if data[i] == '[' {
		end, _, err := d.skipValue(data, i)
		if err != nil {
			return err
		}
		if j := skipWS(data, end); j != len(data) {
			return malformed(ReasonJSONSyntax, "data after array", j)
		}
		return malformed(ReasonJSONNoText, "array, not an object", i)
	}
	if err := d.scanTop(data); err != nil {
		return err
	}
	f := &d.f
	var src jsonString
	complete := true
	switch {
	case f.log.set:
		src = f.log
	case f.message.set:
		src = f.message
	default:
		return malformed(ReasonJSONNoText, `no "log" or "message"`, i)
	}
	if !src.ok {
		name := "log"
		if !f.log.set {
			name = "message"
		}
		return malformed(ReasonJSONType, fmt.Sprintf("%q is not a string", name), i)
	}
	d.hi = hi
	text := src.raw
	newline := false // text had a final newline, now removed
	if n := len(text); src.esc && n >= 2 && text[n-2] == '\\' && text[n-1] == 'n' &&
		bytes.IndexByte(text[:n-2], '\\') < 0 {
		// The common case: the only escape is the line's final "\n". Keep
		// pointing into the record instead of copying.
		text, newline = text[:n-2], true
	} else if src.esc {
		var ok bool
		if d.text, ok = unescape(d.text[:0], text); !ok {
			// scanString validated the escapes; this cannot happen.
			return malformed(ReasonJSONSyntax, "bad escape", i)
		}
		text = d.text
	}
	if n := len(text); !newline && n > 0 && text[n-1] == '\n' {
		text, newline = text[:n-1], true
	}
	switch {
	case f.partial.ok:
		// Fluent Bit's CRI parsers keep the runtime's P/F tag ("_p" from
		// the multiline parser, "logtag" from the classic regex parser)
		// and drop the newline.
		complete = string(f.partial.raw) != "P"
	case f.log.ok:
		// Docker ends every complete line with "\n" and splits longer ones
		// into records without it.
		complete = newline
	default:
		// An untagged "message" is always a whole line.
	}
	env := EnvelopeFluentBit
	if !f.notDocker {
		env = EnvelopeDocker
	}
	d.last = env
	stream := d.streamName(f.stream)
	var meta *pipeline.Meta
	if f.k8s != nil || f.cluster.ok || f.job.ok {
		meta = d.slotMeta(f.k8sSlot, f.k8sGen, f.k8s, f.cluster, f.job)
	}
	t := d.recordTime()
	return d.deliver(text, complete, env, t, stream, meta, emit)
}

// recordTime returns the record's time: "time" (the container runtime's,
// nanosecond precision) before "@timestamp" and "date" (Fluent Bit's).
// An unparsable time is ignored.
func (d *Decoder) recordTime() time.Time {
	for _, v := range [...]*jsonTime{&d.f.time, &d.f.timestamp, &d.f.date} {
		if !v.ok {
			continue
		}
		raw := v.raw
		if v.esc {
			var ok bool
			if d.val, ok = unescape(d.val[:0], raw); !ok {
				continue
			}
			raw = d.val
		}
		var t time.Time
		var ok bool
		if v.str {
			var f dateTime
			var n int
			f, n, ok = scanDateTime(raw, false)
			if ok = ok && n == len(raw); ok {
				// Records of one stream share their day: build its
				// midnight once.
				if k := f.dayKey(); k != d.dayKey {
					d.dayKey, d.dayStart = k, f.midnight()
				}
				t = d.dayStart.Add(f.clock)
			}
		} else {
			t, ok = parseEpoch(raw)
		}
		if ok {
			return t
		}
	}
	return time.Time{}
}

// streamName returns the stream as a string without allocating for the two
// names that occur.
func (d *Decoder) streamName(s jsonString) string {
	if !s.ok {
		return ""
	}
	switch string(s.raw) {
	case "stdout":
		return "stdout"
	case "stderr":
		return "stderr"
	}
	raw := s.raw
	if s.esc {
		d.val, _ = unescape(d.val[:0], raw)
		raw = d.val
	}
	if d.stream != string(raw) {
		d.stream = string(raw)
	}
	return d.stream
}

// scanTop walks the top-level object of data, validating it and recording
// the keys the decoder wants in d.f. Duplicate keys: the last one wins, as
// in encoding/json.
func (d *Decoder) scanTop(data []byte) error {
	d.f = jsonFields{}
	i := skipWS(data, 0)
	i++ // '{', checked by the caller
	i = skipWS(data, i)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return malformed(syntaxOrEnd(data, i), "object key expected", i)
			}
			ke, kesc, ok := scanStringCtl(data, i, d.ctl)
			if !ok {
				return badString(data, i)
			}
			key := data[i+1 : ke-1]
			if kesc {
				d.key, _ = unescape(d.key[:0], key)
				key = d.key
			}
			i = skipWS(data, ke)
			if i >= len(data) || data[i] != ':' {
				return malformed(syntaxOrEnd(data, i), "':' expected", i)
			}
			i = skipWS(data, i+1)
			vs := i
			ve, vesc, slot, err := d.topValue(data, i)
			if err != nil {
				return err
			}
			d.setField(key, data[vs:ve], vesc, slot)
			i = skipWS(data, ve)
			if i >= len(data) {
				return malformed(ReasonJSONTruncated, "unterminated object", i)
			}
			if data[i] == ',' {
				i = skipWS(data, i+1)
				continue
			}
			if data[i] != '}' {
				return malformed(ReasonJSONSyntax, "',' or '}' expected", i)
			}
			i++
			break
		}
	}
	if skipWS(data, i) != len(data) {
		return malformed(ReasonJSONSyntax, "data after object", i)
	}
	return nil
}

// topValue is skipValue for a member of the top-level object. A container
// value whose bytes equal one found valid before ends where that one did:
// JSON is read left to right, so the same bytes parse the same way, and
// the value's end does not depend on what follows it. slot is 1 + the
// valid slot that holds a container value's bytes now, 0 when none does.
func (d *Decoder) topValue(data []byte, i int) (end int, esc bool, slot int, err error) {
	if i < len(data) && (data[i] == '{' || data[i] == '[') {
		set := d.validSet(data[i:])
		ways := d.valid[set*validWays : (set+1)*validWays]
		for k := range ways {
			if v := ways[k].b; len(v) > 0 && len(v) <= len(data)-i && bytes.Equal(data[i:i+len(v)], v) {
				return i + len(v), false, set*validWays + k + 1, nil
			}
		}
		end, esc, err = d.skipValue(data, i)
		if err == nil && end-i <= maxMetaKeyBytes {
			slot = d.storeValid(set, data[i:end])
		}
		return end, esc, slot, err
	}
	if i < len(data) {
		// The scalars of skipValue, without its container stack.
		switch c := data[i]; {
		case c == '"':
			e, sesc, ok := scanStringCtl(data, i, d.ctl)
			if !ok {
				return 0, false, 0, badString(data, i)
			}
			return e, sesc, 0, nil
		case c == '-' || c >= '0' && c <= '9':
			n := scanNumber(data[i:])
			if n == 0 {
				return 0, false, 0, badNumber(data, i)
			}
			return i + n, false, 0, nil
		}
	}
	end, esc, err = d.skipValue(data, i)
	return end, esc, 0, err
}

// The valid values' table (Decoder.valid): validSlots entries in sets of
// validWays, chosen by the first validPrefix bytes at the value. A cluster
// stream interleaves the pods of a few dozen jobs in one partition (the
// load benchmark's cluster shape: ~24 jobs of 1-8 nodes); eight entries
// kept one in five of them. Fluent Bit's kubernetes filter writes
// pod_name first, so the prefix tells pods apart; values that share it
// share a set, and validWays of them fit. validMaxBytes bounds the bytes
// the entries hold (the eight 16 KiB entries of the table before it): a
// value that does not fit is validated each time, as a miss is.
const (
	validSlots    = 128
	validWays     = 4
	validPrefix   = 128
	validMaxBytes = 128 << 10
)

// validSet returns the set of the value at the start of b.
func (d *Decoder) validSet(b []byte) int {
	return int(maphash.Bytes(d.seed, b[:min(len(b), validPrefix)]) % (validSlots / validWays))
}

// storeValid keeps v, a valid value, in a way of set (round robin) and
// returns 1 + its slot, or 0 when it is not kept (validMaxBytes).
func (d *Decoder) storeValid(set int, v []byte) int {
	k := set*validWays + int(d.validNext[set])
	e := &d.valid[k]
	buf := e.b[:0]
	if cap(buf) < len(v) || cap(buf) > 2*len(v)+64 {
		buf = nil // a buffer sized for another value: not kept for this one
	}
	grow := 0
	if buf == nil {
		grow = len(v)
	}
	if d.validBytes-cap(e.b)+cap(buf)+grow > validMaxBytes {
		return 0
	}
	d.validNext[set] = uint8((int(d.validNext[set]) + 1) % validWays)
	d.validBytes -= cap(e.b)
	if buf == nil {
		buf = make([]byte, 0, len(v))
	}
	d.validBytes += cap(buf)
	d.validGen++
	*e = validEntry{b: append(buf, v...), gen: d.validGen}
	return k + 1
}

// setField records one member of the top-level object; val is its raw
// JSON value, slot its valid slot (topValue).
func (d *Decoder) setField(key, val []byte, esc bool, slot int) {
	f := &d.f
	str := func(s *jsonString) {
		*s = jsonString{set: true}
		if val[0] == '"' {
			*s = jsonString{raw: val[1 : len(val)-1], esc: esc, ok: true, set: true}
		}
	}
	tm := func(t *jsonTime) {
		*t = jsonTime{}
		switch c := val[0]; {
		case c == '"':
			*t = jsonTime{raw: val[1 : len(val)-1], esc: esc, str: true, ok: true}
		case c == '-' || c >= '0' && c <= '9':
			*t = jsonTime{raw: val, ok: true}
		}
	}
	switch string(key) {
	case "log":
		str(&f.log)
		return
	case "stream":
		str(&f.stream)
		return
	case "time":
		tm(&f.time)
		return
	case "attrs": // Docker's --log-opt labels/env; not used.
		return
	case "message":
		str(&f.message)
	case "@timestamp":
		tm(&f.timestamp)
	case "date":
		tm(&f.date)
	case "cluster":
		str(&f.cluster)
	case "job":
		str(&f.job)
	case "_p", "logtag":
		str(&f.partial)
	case "kubernetes":
		f.k8s, f.k8sSlot, f.k8sGen = nil, 0, 0
		if val[0] == '{' {
			f.k8s, f.k8sSlot = val, slot
			if slot > 0 {
				f.k8sGen = d.valid[slot-1].gen
			}
		}
	}
	f.notDocker = true
}

// slotMeta is lookupMeta of a record whose "kubernetes" object is the
// bytes of valid slot slot-1 (0: none) as stored in generation gen: the
// entry last built from that slot serves without comparing the object
// again, when the top-level cluster and job match too. (A later member of
// the same record may have refilled the slot: gen tells.)
func (d *Decoder) slotMeta(slot int, gen uint32, k8s []byte, cluster, job jsonString) *pipeline.Meta {
	if slot == 0 || d.valid[slot-1].gen != gen {
		return d.lookupMeta(k8s, cluster, job)
	}
	v := &d.valid[slot-1]
	if e := v.meta; e != nil && bytes.Equal(e.cluster, cluster.raw) && bytes.Equal(e.job, job.raw) {
		return e.meta
	}
	m := d.lookupMeta(k8s, cluster, job)
	if e := d.recent[0]; e != nil && e.meta == m {
		v.meta = e
	}
	return m
}

// lookupMeta returns the shared Meta for the given raw metadata, building
// it on first sight.
func (d *Decoder) lookupMeta(k8s []byte, cluster, job jsonString) *pipeline.Meta {
	for i, e := range &d.recent {
		if e == nil {
			break
		}
		if bytes.Equal(e.k8s, k8s) && bytes.Equal(e.cluster, cluster.raw) && bytes.Equal(e.job, job.raw) {
			if i > 0 {
				copy(d.recent[1:i+1], d.recent[:i])
				d.recent[0] = e
			}
			return e.meta
		}
	}
	if len(k8s)+len(cluster.raw)+len(job.raw) > maxMetaKeyBytes {
		return d.buildMeta(k8s, cluster, job)
	}
	h := maphash.Bytes(d.seed, k8s)
	h = h*0x9E3779B97F4A7C15 ^ maphash.Bytes(d.seed, cluster.raw)
	h = h*0x9E3779B97F4A7C15 ^ maphash.Bytes(d.seed, job.raw)
	if e := d.metas[h]; e != nil && bytes.Equal(e.k8s, k8s) &&
		bytes.Equal(e.cluster, cluster.raw) && bytes.Equal(e.job, job.raw) {
		d.remember(e)
		return e.meta
	}
	if d.metas == nil || len(d.metas) >= maxMetaEntries {
		d.metas = make(map[uint64]*metaEntry)
		// Only the last entry outlives the cache it was in, so that the
		// dropped map's entries can be freed: a dropped one is built again.
		clear(d.recent[1:])
	}
	// One allocation holds the three keys.
	buf := make([]byte, 0, len(k8s)+len(cluster.raw)+len(job.raw))
	buf = append(buf, k8s...)
	buf = append(buf, cluster.raw...)
	buf = append(buf, job.raw...)
	a, b := len(k8s), len(k8s)+len(cluster.raw)
	e := &metaEntry{k8s: buf[:a:a], cluster: buf[a:b:b], job: buf[b:], meta: d.buildMeta(k8s, cluster, job)}
	d.metas[h] = e
	d.remember(e)
	return e.meta
}

// metaSlots is how many metadata entries Decoder.recent holds.
const metaSlots = 4

// remember makes e the most recent metadata entry.
func (d *Decoder) remember(e *metaEntry) {
	copy(d.recent[1:], d.recent[:metaSlots-1])
	d.recent[0] = e
}

// buildMeta builds a Meta from a validated "kubernetes" object (may be nil)
// and the top-level cluster and job strings.
func (d *Decoder) buildMeta(k8s []byte, cluster, job jsonString) *pipeline.Meta {
	m := &pipeline.Meta{Cluster: d.str(cluster), Job: d.str(job)}
	if k8s == nil {
		return m
	}
	d.eachMember(k8s, func(key, val []byte, esc bool) {
		s := jsonString{esc: esc}
		if val[0] == '"' {
			s.raw, s.ok = val[1:len(val)-1], true
		}
		switch string(key) {
		case "pod_name":
			m.Pod = d.str(s)
		case "namespace_name":
			m.Namespace = d.str(s)
		case "host":
			m.Node = d.str(s)
		case "container_name":
			m.Container = d.str(s)
		case "labels":
			if val[0] != '{' {
				return
			}
			labels := make(map[string]string)
			d.eachMember(val, func(k, v []byte, esc bool) {
				if v[0] == '"' {
					// k lives in d.key, which the next member overwrites.
					labels[string(k)] = d.str(jsonString{raw: v[1 : len(v)-1], esc: esc, ok: true})
				}
			})
			if len(labels) > 0 {
				m.Labels = labels
			}
		}
	})
	return m
}

// str returns a JSON string value as a new Go string.
func (d *Decoder) str(s jsonString) string {
	if !s.ok {
		return ""
	}
	raw := s.raw
	if s.esc {
		d.val, _ = unescape(d.val[:0], s.raw)
		raw = d.val
	}
	if d.hi && !utf8.Valid(raw) {
		d.fixed = appendValidUTF8(d.fixed[:0], raw)
		raw = d.fixed
		if d.cfg.InvalidUTF8 != nil {
			d.cfg.InvalidUTF8.Inc()
		}
	}
	return string(raw)
}
