package parsers

import "bytes"

// lokiLabels matches the label set logcli and Grafana's Loki export print
// between the time and the line: "{container="c", pod="w-0"} ". It is
// taken only right after a timestamp.
func lokiLabels(b []byte) int {
	end := bytes.IndexByte(b[:min(len(b), maxRayPrefix)], '}')
	if end < 4 || end+1 < len(b) && b[end+1] != ' ' && b[end+1] != '\t' ||
		!bytes.Contains(b[1:end], []byte("=\"")) {
		return 0
	}
	return end + 1
}

// months are the English month abbreviations journald and Kibana print.
var months = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// monthAt reports whether b starts with a month abbreviation and a blank.
func monthAt(b []byte) bool {
	if len(b) < 4 || b[3] != ' ' {
		return false
	}
	for _, m := range months {
		if string(b[:3]) == m {
			return true
		}
	}
	return false
}

// clockAt returns the length of "HH:MM:SS" (with an optional ".fraction")
// at the start of b, or 0.
func clockAt(b []byte) int {
	if len(b) < 8 || b[2] != ':' || b[5] != ':' {
		return 0
	}
	for _, i := range [...]int{0, 1, 3, 4, 6, 7} {
		if !isDigit(b[i]) {
			return 0
		}
	}
	n := 8
	if n+1 < len(b) && b[n] == '.' && isDigit(b[n+1]) {
		n = skipDigits(b, n+1)
	}
	return n
}

// kibanaTime matches Kibana Discover's time column as a table copy gives it:
// "Dec 4, 2024 @ 07:19:43.480", then a blank or tab.
func kibanaTime(b []byte) int {
	if !monthAt(b) {
		return 0
	}
	i := skipDigits(b, 4)
	if i == 4 || i-4 > 2 || !bytes.HasPrefix(b[i:], []byte(", ")) {
		return 0
	}
	j := skipDigits(b, i+2)
	if j-i-2 != 4 || !bytes.HasPrefix(b[j:], []byte(" @ ")) {
		return 0
	}
	n := clockAt(b[j+3:])
	if n == 0 {
		return 0
	}
	end := j + 3 + n
	if end < len(b) && b[end] != ' ' && b[end] != '\t' {
		return 0
	}
	return end
}

// journaldPrefix matches journalctl's short output "Dec 04 07:19:43 host
// unit[pid]: " (or "unit: ") and returns its length and the host.
func journaldPrefix(b []byte) (int, []byte) {
	if !monthAt(b) {
		return 0, nil
	}
	i := 4
	if i < len(b) && b[i] == ' ' {
		i++ // "Dec  4"
	}
	j := skipDigits(b, i)
	if j == i || j-i > 2 || j >= len(b) || b[j] != ' ' {
		return 0, nil
	}
	n := clockAt(b[j+1:])
	if n == 0 || j+1+n >= len(b) || b[j+1+n] != ' ' {
		return 0, nil
	}
	h := j + 2 + n
	sp := bytes.IndexByte(b[h:min(len(b), h+maxHostLabel)], ' ')
	if sp < 1 {
		return 0, nil
	}
	host := b[h : h+sp]
	u := h + sp + 1
	c := bytes.Index(b[u:min(len(b), u+maxRayPrefix)], []byte(": "))
	if c < 1 {
		return 0, nil
	}
	unit := b[u : u+c]
	if o := bytes.IndexByte(unit, '['); o >= 0 {
		if o == 0 || unit[len(unit)-1] != ']' || skipDigits(unit, o+1) != len(unit)-1 {
			return 0, nil
		}
	} else if bytes.ContainsAny(unit, " []") {
		return 0, nil
	}
	return u + c + 2, host
}
