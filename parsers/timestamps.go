package parsers

import (
	"strconv"
	"time"
)

// parseEpoch parses a JSON number of seconds since the Unix epoch, exactly
// to the nanosecond when written as a decimal fraction (Fluent Bit writes
// "1732890000.123456"; a float64 would round it).
func parseEpoch(b []byte) (time.Time, bool) {
	n := scanNumber(b)
	if n == 0 || n != len(b) {
		return time.Time{}, false
	}
	if indexEither(b, 'e', 'E') >= 0 {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil || f != f || f > 1e15 || f < -1e15 {
			return time.Time{}, false
		}
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC(), true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var sec, nsec int64
	i := 0
	for ; i < len(b) && b[i] != '.'; i++ {
		if i >= 15 { // beyond year 30000000
			return time.Time{}, false
		}
		sec = sec*10 + int64(b[i]-'0')
	}
	if i < len(b) {
		scale := int64(1e8)
		for _, c := range b[i+1:] {
			nsec += int64(c-'0') * scale
			scale /= 10
		}
	}
	if neg {
		sec, nsec = -sec, -nsec
	}
	return time.Unix(sec, nsec).UTC(), true
}

// parseDateTime parses an RFC 3339 date-time at the start of b:
// YYYY-MM-DD, 'T', 't' or ' ', hh:mm:ss, an optional fraction ('.', or ','
// when comma is set, as Python's logging writes it), and an optional zone
// ('Z', 'z', ±hh:mm or ±hhmm; none means UTC). It returns the time in UTC
// and the number of bytes used.
func parseDateTime(b []byte, comma bool) (t time.Time, n int, ok bool) {
	f, n, ok := scanDateTime(b, comma)
	if !ok {
		return time.Time{}, 0, false
	}
	return f.midnight().Add(f.clock), n, true
}

// dateTime is a date-time read by scanDateTime: the calendar day and the
// time since its midnight (UTC, the zone offset applied; it may be
// negative or over a day).
type dateTime struct {
	year, month, day int
	clock            time.Duration
}

// midnight returns the start (UTC) of the day.
func (f dateTime) midnight() time.Time {
	return time.Date(f.year, time.Month(f.month), f.day, 0, 0, 0, 0, time.UTC)
}

// dayKey identifies the day, for a cache of midnight().
func (f dateTime) dayKey() int { return (f.year*100+f.month)*100 + f.day }

// scanDateTime is parseDateTime without building the time.Time: the
// checks, the fields and the length.
func scanDateTime(b []byte, comma bool) (f dateTime, n int, ok bool) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || b[13] != ':' || b[16] != ':' {
		return f, 0, false
	}
	switch b[10] {
	case 'T', 't', ' ':
	default:
		return f, 0, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	min, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 ||
		day > daysIn(month, year) || hour > 23 || min > 59 || sec > 59 {
		return f, 0, false
	}
	n = 19
	nsec := 0
	if n < len(b) && (b[n] == '.' || comma && b[n] == ',') {
		j := skipDigits(b, n+1)
		if j == n+1 {
			return f, 0, false
		}
		// Nanoseconds: the first nine digits, the rest cut off.
		frac := b[n+1 : j]
		if len(frac) > 9 {
			frac = frac[:9]
		}
		for _, c := range frac {
			nsec = nsec*10 + int(c-'0')
		}
		nsec *= pow10[9-len(frac)]
		n = j
	}
	offset := 0
	if n < len(b) {
		switch c := b[n]; c {
		case 'Z', 'z':
			n++
		case '+', '-':
			z := b[n+1:]
			var hh, mm int
			var ok1, ok2 bool
			switch {
			case len(z) >= 5 && z[2] == ':':
				hh, ok1 = digits(z[0:2])
				mm, ok2 = digits(z[3:5])
				n += 6
			case len(z) >= 4:
				hh, ok1 = digits(z[0:2])
				mm, ok2 = digits(z[2:4])
				n += 5
			}
			if !ok1 || !ok2 || hh > 23 || mm > 59 {
				return f, 0, false
			}
			offset = (hh*60 + mm) * 60
			if c == '-' {
				offset = -offset
			}
		}
	}
	clock := time.Duration(hour*3600+min*60+sec-offset)*time.Second + time.Duration(nsec)
	return dateTime{year: year, month: month, day: day, clock: clock}, n, true
}

// digits parses a short run of decimal digits.
func digits(b []byte) (int, bool) {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// pow10 are the powers of ten up to 10^9.
var pow10 = [...]int{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
