package chattemplate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// The lexer reproduces jinja2.lexer.Lexer (3.1) for the default delimiters
// with trim_blocks=True and lstrip_blocks=True, the settings transformers
// uses. Jinja2 lexes with regular expressions; the code below follows each
// rule and the order in which Jinja2 tries them.

type tokType uint8

const (
	tEOF tokType = iota
	tData
	tBlockBegin
	tBlockEnd
	tVarBegin
	tVarEnd
	tName
	tString
	tInt
	tFloat
	tOp
)

// token is one lexer token. pos is its byte offset in the normalized
// source.
type token struct {
	typ tokType
	val string // data text, name, decoded string literal or operator
	num Value  // value of an integer or float literal
	pos int
}

// describe names a token the way Jinja2's error messages do.
func (t token) describe() string {
	switch t.typ {
	case tEOF:
		return "end of template"
	case tBlockBegin:
		return "begin of statement block"
	case tBlockEnd:
		return "end of statement block"
	case tVarBegin:
		return "begin of print statement"
	case tVarEnd:
		return "end of print statement"
	case tData:
		return "template data / text"
	case tString:
		return "string"
	case tInt:
		return "integer"
	case tFloat:
		return "float"
	}
	return t.val
}

// normalizeSource applies Jinja2's newline handling: \r\n, \r and \n all
// become \n, and a single trailing newline is dropped
// (keep_trailing_newline=False).
func normalizeSource(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// lineCol converts a byte offset of src into a 1-based line and column
// (in characters).
func lineCol(src string, pos int) (int, int) {
	if pos > len(src) {
		pos = len(src)
	}
	line := 1 + strings.Count(src[:pos], "\n")
	start := strings.LastIndexByte(src[:pos], '\n') + 1
	return line, utf8.RuneCountInString(src[start:pos]) + 1
}

type lexer struct {
	src          string
	pos          int
	toks         []token
	lineStarting bool   // the previous match ended with a newline
	balance      []byte // expected closing brackets inside a tag
}

// lexError is a syntax error found by the lexer.
type lexError struct {
	pos int
	msg string
}

func (e *lexError) Error() string { return e.msg }

func (lx *lexer) fail(pos int, format string, args ...any) error {
	return &lexError{pos: pos, msg: fmt.Sprintf(format, args...)}
}

func (lx *lexer) emit(typ tokType, val string, pos int) {
	lx.toks = append(lx.toks, token{typ: typ, val: val, pos: pos})
}

// tokenize lexes a normalized template source.
func tokenize(src string) ([]token, error) {
	lx := &lexer{src: src, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{typ: tEOF, pos: len(src)})
	return lx.toks, nil
}

// stripBefore applies the whitespace control of a tag to the text before
// it: "-" strips all trailing whitespace; otherwise (unless "+", or the tag
// is a variable) lstrip_blocks removes spaces and tabs between the last
// newline (or the start of a line) and the tag.
func (lx *lexer) stripBefore(text string, sign byte, isVar bool) string {
	if sign == '-' {
		return strings.TrimRightFunc(text, pyfmt.IsSpace)
	}
	if sign == '+' || isVar {
		return text
	}
	l := strings.LastIndexByte(text, '\n') + 1
	if l > 0 || lx.lineStarting {
		rest := text[l:]
		if rest != "" && strings.TrimLeftFunc(rest, pyfmt.IsSpace) == "" {
			return text[:l]
		}
	}
	return text
}

func (lx *lexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		i := indexTagStart(src, lx.pos)
		if i < 0 {
			lx.emit(tData, src[lx.pos:], lx.pos)
			lx.pos = len(src)
			return nil
		}
		text := src[lx.pos:i]
		if src[i+1] == '%' {
			if end, sign, ok := matchRawBegin(src, i); ok {
				text = lx.stripBefore(text, sign, false)
				if text != "" {
					lx.emit(tData, text, lx.pos)
				}
				lx.lineStarting = src[end-1] == '\n'
				if err := lx.lexRaw(end, i); err != nil {
					return err
				}
				continue
			}
		}
		j := i + 2
		var sign byte
		if j < len(src) && (src[j] == '-' || src[j] == '+') {
			sign = src[j]
			j++
		}
		kind := src[i+1]
		text = lx.stripBefore(text, sign, kind == '{')
		if text != "" {
			lx.emit(tData, text, lx.pos)
		}
		lx.lineStarting = false
		lx.pos = j
		var err error
		switch kind {
		case '#':
			err = lx.lexComment(i)
		case '%':
			lx.emit(tBlockBegin, src[i:j], i)
			err = lx.lexTag(false)
		default:
			lx.emit(tVarBegin, src[i:j], i)
			err = lx.lexTag(true)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// indexTagStart finds the next "{%", "{{" or "{#" at or after from.
func indexTagStart(src string, from int) int {
	for {
		k := strings.IndexByte(src[from:], '{')
		if k < 0 {
			return -1
		}
		i := from + k
		if i+1 < len(src) {
			switch src[i+1] {
			case '%', '{', '#':
				return i
			}
		}
		from = i + 1
	}
}

// skipSpace returns the position after a run of Python whitespace.
func skipSpace(src string, p int) int {
	for p < len(src) {
		r, n := utf8.DecodeRuneInString(src[p:])
		if !pyfmt.IsSpace(r) {
			break
		}
		p += n
	}
	return p
}

// matchRawBegin matches `{%(-|+|)\s*raw\s*(?:-%}\s*|%})` at i.
func matchRawBegin(src string, i int) (end int, sign byte, ok bool) {
	p := i + 2
	if p < len(src) && (src[p] == '-' || src[p] == '+') {
		sign = src[p]
		p++
	}
	p = skipSpace(src, p)
	if !strings.HasPrefix(src[p:], "raw") {
		return 0, 0, false
	}
	p = skipSpace(src, p+3)
	switch {
	case strings.HasPrefix(src[p:], "-%}"):
		return skipSpace(src, p+3), sign, true
	case strings.HasPrefix(src[p:], "%}"):
		return p + 2, sign, true
	}
	return 0, 0, false
}

// matchRawEnd matches `{%(-|+|)\s*endraw\s*(?:+%}|-%}\s*|%}\n?)` at i.
func matchRawEnd(src string, i int) (end int, sign byte, ok bool) {
	p := i + 2
	if p < len(src) && (src[p] == '-' || src[p] == '+') {
		sign = src[p]
		p++
	}
	p = skipSpace(src, p)
	if !strings.HasPrefix(src[p:], "endraw") {
		return 0, 0, false
	}
	p = skipSpace(src, p+6)
	switch {
	case strings.HasPrefix(src[p:], "+%}"):
		return p + 3, sign, true
	case strings.HasPrefix(src[p:], "-%}"):
		return skipSpace(src, p+3), sign, true
	case strings.HasPrefix(src[p:], "%}"):
		p += 2
		if p < len(src) && src[p] == '\n' {
			p++
		}
		return p, sign, true
	}
	return 0, 0, false
}

// lexRaw lexes the body of {% raw %} starting at from.
func (lx *lexer) lexRaw(from, tagPos int) error {
	src := lx.src
	for k := from; ; {
		i := strings.Index(src[k:], "{%")
		if i < 0 {
			return lx.fail(tagPos, "Missing end of raw directive")
		}
		i += k
		if end, sign, ok := matchRawEnd(src, i); ok {
			text := lx.stripBefore(src[from:i], sign, false)
			if text != "" {
				lx.emit(tData, text, from)
			}
			lx.lineStarting = src[end-1] == '\n'
			lx.pos = end
			return nil
		}
		k = i + 2
	}
}

// lexComment skips a comment whose "{#" is at start; lx.pos is after the
// opening tag and its sign.
func (lx *lexer) lexComment(start int) error {
	src := lx.src
	q := strings.Index(src[lx.pos:], "#}")
	if q < 0 {
		return lx.fail(start, "Missing end of comment tag")
	}
	q += lx.pos
	end := q + 2
	switch {
	case q > lx.pos && src[q-1] == '+':
	case q > lx.pos && src[q-1] == '-':
		end = skipSpace(src, end)
	default:
		if end < len(src) && src[end] == '\n' {
			end++
		}
	}
	lx.lineStarting = src[end-1] == '\n'
	lx.pos = end
	return nil
}

// operators, longest first.
var operators = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// lexTag lexes the inside of {% %} (isVar false) or {{ }} up to and
// including the closing delimiter.
func (lx *lexer) lexTag(isVar bool) error {
	src := lx.src
	lx.balance = lx.balance[:0]
	for lx.pos < len(src) {
		p := lx.pos
		rest := src[p:]
		if len(lx.balance) == 0 {
			if !isVar {
				switch {
				case strings.HasPrefix(rest, "+%}"):
					lx.endTag(tBlockEnd, p, p+3)
					return nil
				case strings.HasPrefix(rest, "-%}"):
					lx.endTag(tBlockEnd, p, skipSpace(src, p+3))
					return nil
				case strings.HasPrefix(rest, "%}"):
					end := p + 2
					if end < len(src) && src[end] == '\n' {
						end++
					}
					lx.endTag(tBlockEnd, p, end)
					return nil
				}
			} else {
				switch {
				case strings.HasPrefix(rest, "-}}"):
					lx.endTag(tVarEnd, p, skipSpace(src, p+3))
					return nil
				case strings.HasPrefix(rest, "}}"):
					lx.endTag(tVarEnd, p, p+2)
					return nil
				}
			}
		}
		if q := skipSpace(src, p); q > p {
			lx.pos = q
			continue
		}
		if end, ok := matchFloat(src, p); ok {
			f, err := strconv.ParseFloat(strings.ReplaceAll(src[p:end], "_", ""), 64)
			if err != nil && !math.IsInf(f, 0) {
				return lx.fail(p, "invalid float literal %q", src[p:end])
			}
			lx.toks = append(lx.toks, token{typ: tFloat, val: src[p:end], num: Float(f), pos: p})
			lx.pos = end
			continue
		}
		if end, ok := matchInteger(src, p); ok {
			lit := strings.ToLower(strings.ReplaceAll(src[p:end], "_", ""))
			base := 10
			digits := lit
			if len(lit) > 1 && lit[0] == '0' {
				switch lit[1] {
				case 'b':
					base, digits = 2, lit[2:]
				case 'o':
					base, digits = 8, lit[2:]
				case 'x':
					base, digits = 16, lit[2:]
				}
			}
			n, err := strconv.ParseInt(digits, base, 64)
			if err != nil {
				return lx.fail(p, "integer literal %s is too large", src[p:end])
			}
			lx.toks = append(lx.toks, token{typ: tInt, val: src[p:end], num: Int(n), pos: p})
			lx.pos = end
			continue
		}
		if end := matchName(src, p); end > p {
			lx.emit(tName, src[p:end], p)
			lx.pos = end
			continue
		}
		if c := src[p]; c == '\'' || c == '"' {
			if end, ok := matchString(src, p); ok {
				s, err := decodeStringLiteral(src[p+1 : end-1])
				if err != nil {
					return lx.fail(p, "%s", err.Error())
				}
				lx.emit(tString, s, p)
				lx.pos = end
				continue
			}
		}
		op := ""
		for _, o := range operators {
			if strings.HasPrefix(rest, o) {
				op = o
				break
			}
		}
		if op == "" {
			r, _ := utf8.DecodeRuneInString(rest)
			return lx.fail(p, "unexpected char %s at %d", pyfmt.Repr(string(r)), p)
		}
		switch op {
		case "{":
			lx.balance = append(lx.balance, '}')
		case "(":
			lx.balance = append(lx.balance, ')')
		case "[":
			lx.balance = append(lx.balance, ']')
		case "}", ")", "]":
			if len(lx.balance) == 0 {
				return lx.fail(p, "unexpected '%s'", op)
			}
			want := lx.balance[len(lx.balance)-1]
			lx.balance = lx.balance[:len(lx.balance)-1]
			if want != op[0] {
				return lx.fail(p, "unexpected '%s', expected '%c'", op, want)
			}
		}
		lx.emit(tOp, op, p)
		lx.pos = p + len(op)
	}
	return nil
}

func (lx *lexer) endTag(typ tokType, p, end int) {
	lx.emit(typ, lx.src[p:end], p)
	lx.lineStarting = lx.src[end-1] == '\n'
	lx.pos = end
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// matchDigits matches `(\d+_)*\d+` at p and returns its end, or -1.
func matchDigits(src string, p int) int {
	if p >= len(src) || !isDigit(src[p]) {
		return -1
	}
	for p < len(src) && isDigit(src[p]) {
		p++
	}
	for p+1 < len(src) && src[p] == '_' && isDigit(src[p+1]) {
		p++
		for p < len(src) && isDigit(src[p]) {
			p++
		}
	}
	return p
}

// matchExponent matches `e[+-]?(\d+_)*\d+` (any case) at p.
func matchExponent(src string, p int) int {
	if p >= len(src) || (src[p] != 'e' && src[p] != 'E') {
		return -1
	}
	p++
	if p < len(src) && (src[p] == '+' || src[p] == '-') {
		p++
	}
	return matchDigits(src, p)
}

// matchFloat matches Jinja2's float_re at p.
func matchFloat(src string, p int) (int, bool) {
	if p > 0 && src[p-1] == '.' {
		return 0, false
	}
	a := matchDigits(src, p)
	if a < 0 {
		return 0, false
	}
	frac := -1
	if a < len(src) && src[a] == '.' {
		frac = matchDigits(src, a+1)
	}
	if frac > 0 {
		if e := matchExponent(src, frac); e > 0 {
			return e, true
		}
	}
	if e := matchExponent(src, a); e > 0 {
		return e, true
	}
	if frac > 0 {
		return frac, true
	}
	return 0, false
}

// matchInteger matches Jinja2's integer_re at p.
func matchInteger(src string, p int) (int, bool) {
	if p >= len(src) || !isDigit(src[p]) {
		return 0, false
	}
	digitsOf := func(q int, ok func(byte) bool) int {
		// (_?[digit])+
		n := 0
		for {
			r := q
			if r < len(src) && src[r] == '_' {
				r++
			}
			if r < len(src) && ok(src[r]) {
				q = r + 1
				n++
				continue
			}
			break
		}
		if n == 0 {
			return -1
		}
		return q
	}
	if src[p] == '0' && p+1 < len(src) {
		var ok func(byte) bool
		switch src[p+1] {
		case 'b', 'B':
			ok = func(c byte) bool { return c == '0' || c == '1' }
		case 'o', 'O':
			ok = func(c byte) bool { return c >= '0' && c <= '7' }
		case 'x', 'X':
			ok = func(c byte) bool {
				return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
			}
		}
		if ok != nil {
			if e := digitsOf(p+2, ok); e > 0 {
				return e, true
			}
		}
	}
	if src[p] == '0' {
		q := p + 1
		for {
			r := q
			if r < len(src) && src[r] == '_' {
				r++
			}
			if r < len(src) && src[r] == '0' {
				q = r + 1
				continue
			}
			break
		}
		return q, true
	}
	q := p + 1
	for {
		r := q
		if r < len(src) && src[r] == '_' {
			r++
		}
		if r < len(src) && isDigit(src[r]) {
			q = r + 1
			continue
		}
		break
	}
	return q, true
}

// isNameRune approximates the characters of Jinja2's name pattern (Python
// \w plus combining marks).
func isNameRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Pc)
}

// matchName matches a name at p and returns its end (p if none).
func matchName(src string, p int) int {
	q := p
	for q < len(src) {
		r, n := utf8.DecodeRuneInString(src[q:])
		if !isNameRune(r) {
			break
		}
		q += n
	}
	return q
}

// matchString matches a quoted string literal at p and returns the end
// after the closing quote.
func matchString(src string, p int) (int, bool) {
	q := src[p]
	for i := p + 1; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case q:
			return i + 1, true
		}
	}
	return 0, false
}

// decodeStringLiteral decodes a string literal body the way Jinja2 does:
// s.encode("ascii", "backslashreplace").decode("unicode-escape").
func decodeStringLiteral(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	// backslashreplace: non-ASCII characters become escapes first, so an
	// escaped backslash before one behaves as it does in Python.
	var esc strings.Builder
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf:
			esc.WriteByte(byte(r))
		case r < 0x100:
			fmt.Fprintf(&esc, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&esc, `\u%04x`, r)
		default:
			fmt.Fprintf(&esc, `\U%08x`, r)
		}
	}
	e := esc.String()
	var b strings.Builder
	var pendingHigh rune = -1
	put := func(r rune) {
		if pendingHigh >= 0 {
			if r >= 0xdc00 && r <= 0xdfff {
				b.WriteRune(0x10000 + (pendingHigh-0xd800)<<10 + (r - 0xdc00))
				pendingHigh = -1
				return
			}
			b.WriteRune(utf8.RuneError)
			pendingHigh = -1
		}
		if r >= 0xd800 && r <= 0xdbff {
			pendingHigh = r
			return
		}
		b.WriteRune(r)
	}
	hex := func(i, n int) (rune, bool) {
		if i+n > len(e) {
			return 0, false
		}
		v, err := strconv.ParseUint(e[i:i+n], 16, 32)
		if err != nil {
			return 0, false
		}
		return rune(v), true
	}
	for i := 0; i < len(e); i++ {
		c := e[i]
		if c != '\\' {
			put(rune(c))
			continue
		}
		i++
		if i >= len(e) {
			return "", fmt.Errorf("'unicodeescape' codec can't decode byte 0x5c: \\ at end of string")
		}
		switch c = e[i]; c {
		case '\n':
		case '\\', '\'', '"':
			put(rune(c))
		case 'a':
			put(7)
		case 'b':
			put(8)
		case 'f':
			put(12)
		case 'n':
			put('\n')
		case 'r':
			put('\r')
		case 't':
			put('\t')
		case 'v':
			put(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := rune(c - '0')
			for k := 0; k < 2 && i+1 < len(e) && e[i+1] >= '0' && e[i+1] <= '7'; k++ {
				i++
				v = v*8 + rune(e[i]-'0')
			}
			put(v)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			r, ok := hex(i+1, n)
			if !ok {
				return "", fmt.Errorf("'unicodeescape' codec can't decode bytes: truncated \\%c escape", c)
			}
			if r > unicode.MaxRune {
				return "", fmt.Errorf("'unicodeescape' codec can't decode bytes: illegal Unicode character")
			}
			put(r)
			i += n
		case 'N':
			return "", fmt.Errorf("\\N{...} escapes are not supported")
		default:
			put('\\')
			put(rune(c))
		}
	}
	if pendingHigh >= 0 {
		b.WriteRune(utf8.RuneError)
	}
	return b.String(), nil
}
