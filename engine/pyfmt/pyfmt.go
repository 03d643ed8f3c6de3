// Package pyfmt is Python's text semantics, stated once: how Python prints
// values (repr of floats and strs, json.dumps' strings and floats) and
// which characters its str methods treat as whitespace. vLLM's output is
// Python's text in many places (chat templates' repr and tojson, tool-call
// arguments written with json.dumps, pydantic's error messages, the
// request log), and every package that reproduces it calls this one.
package pyfmt

import (
	"math"
	"strconv"
	"strings"
)

// FloatRepr is Python's repr(float): the shortest digits that round-trip,
// fixed notation for 1e-4 <= |f| < 1e16 with at least one fractional
// digit, otherwise d.ddde±XX; nan, inf, -inf.
func FloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case f == 0:
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±xx
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	e := strings.IndexByte(s, 'e')
	mant, exp := s[:e], s[e+1:]
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	decpt := x + 1
	var out string
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			out = "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			out = digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			out = digits[:decpt] + "." + digits[decpt:]
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if x < 0 {
			sign = "-"
			x = -x
		}
		es := strconv.Itoa(x)
		if len(es) < 2 {
			es = "0" + es
		}
		out += "e" + sign + es
	}
	if neg {
		return "-" + out
	}
	return out
}

// AppendFloatRepr appends FloatRepr(f) to dst.
func AppendFloatRepr(dst []byte, f float64) []byte { return append(dst, FloatRepr(f)...) }

// JSONFloat is a float as json.dumps writes it: FloatRepr, with NaN,
// Infinity and -Infinity for the non-finite values (allow_nan=True).
func JSONFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return FloatRepr(f)
}
