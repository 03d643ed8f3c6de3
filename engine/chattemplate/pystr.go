package chattemplate

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// Python str semantics over Go's UTF-8 strings. Python indexes strings by
// code point, so every index here is a rune index.

// pyIsCased reports whether r has a case (Python's _PyUnicode_IsCased).
func pyIsCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// isASCII reports whether s has only ASCII bytes.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// runeLen is len(s) in Python.
func runeLen(s string) int {
	if isASCII(s) {
		return len(s)
	}
	return utf8.RuneCountInString(s)
}

// pyStrip is str.strip/lstrip/rstrip. chars nil means whitespace.
func pyStrip(s string, chars *string, left, right bool) string {
	in := pyfmt.IsSpace
	if chars != nil {
		set := *chars
		in = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// pyUpper is str.upper with the one full case mapping that matters in
// practice (ß → SS).
func pyUpper(s string) string {
	u := strings.ToUpper(s)
	if strings.ContainsRune(u, 'ß') {
		u = strings.ReplaceAll(u, "ß", "SS")
	}
	return u
}

// pyLower is str.lower.
func pyLower(s string) string { return strings.ToLower(s) }

// pyTitle is Python's str.title.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = pyIsCased(r)
	}
	return b.String()
}

// pyCapitalize is Python's str.capitalize: first character title-cased,
// the rest lower-cased.
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToTitle(r)) + pyLower(s[n:])
}

// pySwapcase is Python's str.swapcase.
func pySwapcase(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case unicode.IsUpper(r):
			return unicode.ToLower(r)
		case unicode.IsLower(r):
			return unicode.ToUpper(r)
		}
		return r
	}, s)
}

// jinjaTitle is Jinja2's title filter: each word (split at runs of
// "-", whitespace, "(", "{", "[", "<") gets item[0].upper() +
// item[1:].lower().
func jinjaTitle(s string) string {
	var b strings.Builder
	isSep := func(r rune) bool {
		return r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || pyfmt.IsSpace(r)
	}
	rs := []rune(s)
	for i := 0; i < len(rs); {
		j := i
		if isSep(rs[i]) {
			for j < len(rs) && isSep(rs[j]) {
				j++
			}
			b.WriteString(string(rs[i:j]))
		} else {
			for j < len(rs) && !isSep(rs[j]) {
				j++
			}
			b.WriteString(pyUpper(string(rs[i])))
			b.WriteString(pyLower(string(rs[i+1 : j])))
		}
		i = j
	}
	return b.String()
}

// pySplitWhitespace is str.split(None, maxsplit).
func pySplitWhitespace(s string, maxsplit int) []string {
	rs := []rune(s)
	n := len(rs)
	var out []string
	i := 0
	if maxsplit < 0 {
		maxsplit = n + 1
	}
	for ; maxsplit > 0; maxsplit-- {
		for i < n && pyfmt.IsSpace(rs[i]) {
			i++
		}
		if i == n {
			break
		}
		j := i
		i++
		for i < n && !pyfmt.IsSpace(rs[i]) {
			i++
		}
		out = append(out, string(rs[j:i]))
	}
	if i < n {
		for i < n && pyfmt.IsSpace(rs[i]) {
			i++
		}
		if i != n {
			out = append(out, string(rs[i:]))
		}
	}
	return out
}

// pyRSplitWhitespace is str.rsplit(None, maxsplit).
func pyRSplitWhitespace(s string, maxsplit int) []string {
	rs := []rune(s)
	i := len(rs) - 1
	var out []string
	if maxsplit < 0 {
		maxsplit = len(rs) + 1
	}
	for ; maxsplit > 0; maxsplit-- {
		for i >= 0 && pyfmt.IsSpace(rs[i]) {
			i--
		}
		if i < 0 {
			break
		}
		j := i
		i--
		for i >= 0 && !pyfmt.IsSpace(rs[i]) {
			i--
		}
		out = append(out, string(rs[i+1:j+1]))
	}
	if i >= 0 {
		for i >= 0 && pyfmt.IsSpace(rs[i]) {
			i--
		}
		if i >= 0 {
			out = append(out, string(rs[:i+1]))
		}
	}
	for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
		out[a], out[b] = out[b], out[a]
	}
	return out
}

// pySplit is str.split(sep, maxsplit) with a non-empty sep.
func pySplit(s, sep string, maxsplit int) []string {
	if maxsplit < 0 {
		return strings.Split(s, sep)
	}
	return strings.SplitN(s, sep, maxsplit+1)
}

// pyRSplit is str.rsplit(sep, maxsplit) with a non-empty sep.
func pyRSplit(s, sep string, maxsplit int) []string {
	if maxsplit < 0 {
		return strings.Split(s, sep)
	}
	var out []string
	for maxsplit > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
		maxsplit--
	}
	out = append(out, s)
	for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
		out[a], out[b] = out[b], out[a]
	}
	return out
}

// isLineBreak reports the characters str.splitlines splits at.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// pySplitlines is str.splitlines(keepends).
func pySplitlines(s string, keepends bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !isLineBreak(r) {
			i += n
			continue
		}
		end := i + n
		if r == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		if keepends {
			out = append(out, s[start:end])
		} else {
			out = append(out, s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// runeSubstr returns s[start:end] in Python (rune) indexes, already
// clamped to 0..len.
func runeSubstr(s string, start, end int) string {
	if isASCII(s) {
		return s[start:end]
	}
	rs := []rune(s)
	return string(rs[start:end])
}

// pyIndexRange clamps optional Python start/end arguments for a sequence
// of length n (the slice semantics of str.find etc.).
func pyIndexRange(n int, start, end *int) (int, int) {
	a, b := 0, n
	if start != nil {
		a = *start
		if a < 0 {
			a += n
			if a < 0 {
				a = 0
			}
		}
	}
	if end != nil {
		b = *end
		if b < 0 {
			b += n
			if b < 0 {
				b = 0
			}
		}
		if b > n {
			b = n
		}
	}
	return a, b
}

// pyFind is str.find/rfind: the rune index of sub in s[start:end], or -1.
func pyFind(s, sub string, start, end *int, last bool) int {
	n := runeLen(s)
	a, b := pyIndexRange(n, start, end)
	if a > n || a > b {
		return -1
	}
	hay := runeSubstr(s, a, b)
	var i int
	if last {
		i = strings.LastIndex(hay, sub)
	} else {
		i = strings.Index(hay, sub)
	}
	if i < 0 {
		return -1
	}
	return a + runeLen(hay[:i])
}

// pyCount is str.count.
func pyCount(s, sub string, start, end *int) int {
	n := runeLen(s)
	a, b := pyIndexRange(n, start, end)
	if a > n || a > b {
		return 0
	}
	hay := runeSubstr(s, a, b)
	if sub == "" {
		return runeLen(hay) + 1
	}
	return strings.Count(hay, sub)
}

// allRunes reports whether s is non-empty and every rune satisfies f.
func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

// pyIsLower is str.islower: at least one cased character and all cased
// ones lower case.
func pyIsLower(s string) bool { return pyAllCased(s, unicode.IsLower, unicode.IsUpper) }

// pyIsUpper is str.isupper.
func pyIsUpper(s string) bool { return pyAllCased(s, unicode.IsUpper, unicode.IsLower) }

// pyAllCased reports whether s has at least one character of the case is
// and none of the case other nor title case.
func pyAllCased(s string, is, other func(rune) bool) bool {
	cased := false
	for _, r := range s {
		if other(r) || unicode.IsTitle(r) {
			return false
		}
		if is(r) {
			cased = true
		}
	}
	return cased
}

// spaces returns n spaces (Python's " " * n; empty for n <= 0).
func spaces(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat(" ", n)
}

var (
	shortDays   = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	longDays    = [...]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	shortMonths = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
	longMonths  = [...]string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// pyStrftime is datetime.strftime in the C locale (glibc), including the
// "-" no-padding flag.
func pyStrftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) {
			pad = false
			i++
		}
		num := func(v, width int) {
			s := strconv.Itoa(v)
			if pad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch format[i] {
		case 'a':
			b.WriteString(shortDays[t.Weekday()])
		case 'A':
			b.WriteString(longDays[t.Weekday()])
		case 'b', 'h':
			b.WriteString(shortMonths[t.Month()-1])
		case 'B':
			b.WriteString(longMonths[t.Month()-1])
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if pad && len(s) < 2 {
				s = " " + s
			}
			b.WriteString(s)
		case 'm':
			num(int(t.Month()), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num(hour12, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'j':
			num(t.YearDay(), 3)
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'Z', 'z':
			// datetime.now() is naive: no zone name or offset.
		case 'D':
			b.WriteString(pyStrftime(t, "%m/%d/%y"))
		case 'F':
			b.WriteString(pyStrftime(t, "%Y-%m-%d"))
		case 'T':
			b.WriteString(pyStrftime(t, "%H:%M:%S"))
		case 'R':
			b.WriteString(pyStrftime(t, "%H:%M"))
		case 'c':
			b.WriteString(pyStrftime(t, "%a %b %e %H:%M:%S %Y"))
		case 'x':
			b.WriteString(pyStrftime(t, "%m/%d/%y"))
		case 'X':
			b.WriteString(pyStrftime(t, "%H:%M:%S"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if !pad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
