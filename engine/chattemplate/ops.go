package chattemplate

import (
	"math"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// Python operators on template values.

var opNames = map[string]string{"+": "+", "-": "-", "*": "*", "/": "/", "//": "//", "%": "%", "**": "** or pow()"}

func unsupportedOperand(op string, a, b Value) error {
	return newErr(TypeError, "unsupported operand type(s) for %s: '%s' and '%s'", opNames[op], a.typeName(), b.typeName())
}

func overflow() error {
	return newErr(UnsupportedError, "integer result out of the int64 range")
}

func unaryOp(neg bool, v Value) (Value, error) {
	switch v.kind {
	case UndefinedKind:
		return Value{}, undefErr(v)
	case IntKind, BoolKind:
		if !neg {
			return Int(v.i()), nil
		}
		if v.i() == math.MinInt64 {
			return Value{}, overflow()
		}
		return Int(-v.i()), nil
	case FloatKind:
		if neg {
			return Float(-v.f()), nil
		}
		return v, nil
	}
	sym := "-"
	if !neg {
		sym = "+"
	}
	return Value{}, newErr(TypeError, "bad operand type for unary %s: '%s'", sym, v.typeName())
}

// binaryOp evaluates a arithmetic operator with Python semantics.
func (r *renderer) binaryOp(op string, a, b Value) (Value, error) {
	if a.kind == UndefinedKind {
		return Value{}, undefErr(a)
	}
	if b.kind == UndefinedKind && !(op == "%" && a.kind == StringKind) {
		return Value{}, undefErr(b)
	}
	if a.isNumber() && b.isNumber() {
		return numericOp(op, a, b)
	}
	switch op {
	case "+":
		switch {
		case a.kind == StringKind && b.kind == StringKind:
			if err := r.charge(len(a.str) + len(b.str)); err != nil {
				return Value{}, err
			}
			return String(a.str + b.str), nil
		case a.isRange() || b.isRange():
		case (a.kind == ListKind || a.kind == TupleKind) && a.kind == b.kind:
			x, y := a.list(), b.list()
			if err := r.charge(valueSize * (len(x) + len(y))); err != nil {
				return Value{}, err
			}
			out := make([]Value, 0, len(x)+len(y))
			out = append(append(out, x...), y...)
			return Value{kind: a.kind, ref: out}, nil
		case a.kind == StringKind || a.kind == ListKind || a.kind == TupleKind:
			return Value{}, newErr(TypeError, "can only concatenate %s (not \"%s\") to %s", a.typeName(), b.typeName(), a.typeName())
		}
	case "*":
		seq, n := a, b
		if a.kind == IntKind || a.kind == BoolKind {
			seq, n = b, a
		}
		if n.kind == IntKind || n.kind == BoolKind {
			count := n.i()
			if count < 0 {
				count = 0
			}
			switch seq.kind {
			case StringKind:
				if count > 0 && int64(len(seq.str)) > int64(r.lim.MaxOutputBytes)/count {
					return Value{}, newErr(LimitError, "string repetition exceeds %d bytes", r.lim.MaxOutputBytes)
				}
				if err := r.charge(len(seq.str) * int(count)); err != nil {
					return Value{}, err
				}
				return String(strings.Repeat(seq.str, int(count))), nil
			case ListKind, TupleKind:
				if seq.isRange() {
					break
				}
				l := seq.list()
				if count > 0 && int64(len(l)) > int64(r.lim.MaxOutputBytes/valueSize)/count {
					return Value{}, newErr(LimitError, "list repetition is too large")
				}
				if err := r.charge(valueSize * len(l) * int(count)); err != nil {
					return Value{}, err
				}
				out := make([]Value, 0, len(l)*int(count))
				for i := int64(0); i < count; i++ {
					out = append(out, l...)
				}
				return Value{kind: seq.kind, ref: out}, nil
			}
		}
		if seq.kind == StringKind || seq.kind == ListKind || seq.kind == TupleKind {
			return Value{}, newErr(TypeError, "can't multiply sequence by non-int of type '%s'", n.typeName())
		}
	case "%":
		if a.kind == StringKind {
			s, err := pyPercentFormat(a.str, b)
			if err != nil {
				return Value{}, err
			}
			if err := r.charge(len(s)); err != nil {
				return Value{}, err
			}
			return String(s), nil
		}
	}
	return Value{}, unsupportedOperand(op, a, b)
}

// numericOp applies an operator to two numbers (bools count as ints).
func numericOp(op string, a, b Value) (Value, error) {
	if a.kind != FloatKind && b.kind != FloatKind {
		x, y := a.i(), b.i()
		switch op {
		case "+":
			s := x + y
			if (s > x) != (y > 0) {
				return Value{}, overflow()
			}
			return Int(s), nil
		case "-":
			s := x - y
			if (s < x) != (y > 0) {
				return Value{}, overflow()
			}
			return Int(s), nil
		case "*":
			if x != 0 && y != 0 {
				p := x * y
				if p/y != x || (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) {
					return Value{}, overflow()
				}
			}
			return Int(x * y), nil
		case "/":
			if y == 0 {
				return Value{}, newErr(ValueError, "division by zero")
			}
			return Float(float64(x) / float64(y)), nil
		case "//":
			if y == 0 {
				return Value{}, newErr(ValueError, "integer division or modulo by zero")
			}
			if x == math.MinInt64 && y == -1 {
				return Value{}, overflow()
			}
			q := x / y
			if (x%y != 0) && ((x < 0) != (y < 0)) {
				q--
			}
			return Int(q), nil
		case "%":
			if y == 0 {
				return Value{}, newErr(ValueError, "integer division or modulo by zero")
			}
			if y == -1 {
				return Int(0), nil
			}
			m := x % y
			if m != 0 && ((m < 0) != (y < 0)) {
				m += y
			}
			return Int(m), nil
		case "**":
			if y < 0 {
				if x == 0 {
					return Value{}, newErr(ValueError, "0.0 cannot be raised to a negative power")
				}
				return Float(math.Pow(float64(x), float64(y))), nil
			}
			result := int64(1)
			base := x
			for e := y; e > 0; e >>= 1 {
				if e&1 == 1 {
					v, err := numericOp("*", Int(result), Int(base))
					if err != nil {
						return Value{}, err
					}
					result = v.i()
				}
				if e > 1 {
					v, err := numericOp("*", Int(base), Int(base))
					if err != nil {
						return Value{}, err
					}
					base = v.i()
				}
			}
			return Int(result), nil
		}
	}
	x, _ := a.AsFloat()
	y, _ := b.AsFloat()
	switch op {
	case "+":
		return Float(x + y), nil
	case "-":
		return Float(x - y), nil
	case "*":
		return Float(x * y), nil
	case "/":
		if y == 0 {
			return Value{}, newErr(ValueError, "float division by zero")
		}
		return Float(x / y), nil
	case "//":
		if y == 0 {
			return Value{}, newErr(ValueError, "float floor division by zero")
		}
		q, _ := pyFloatDivmod(x, y)
		return Float(q), nil
	case "%":
		if y == 0 {
			return Value{}, newErr(ValueError, "float modulo")
		}
		_, m := pyFloatDivmod(x, y)
		return Float(m), nil
	case "**":
		if x == 0 && y < 0 {
			return Value{}, newErr(ValueError, "0.0 cannot be raised to a negative power")
		}
		if x < 0 && y != math.Trunc(y) {
			return Value{}, newErr(UnsupportedError, "complex results are not supported")
		}
		p := math.Pow(x, y)
		if math.IsInf(p, 0) && !math.IsInf(x, 0) && !math.IsInf(y, 0) {
			return Value{}, newErr(OverflowError, "(34, 'Numerical result out of range')")
		}
		return Float(p), nil
	}
	return Value{}, unsupportedOperand(op, a, b)
}

// pyFloatDivmod is Python's float divmod.
func pyFloatDivmod(x, y float64) (float64, float64) {
	mod := math.Mod(x, y)
	div := (x - mod) / y
	if mod != 0 {
		if (y < 0) != (mod < 0) {
			mod += y
			div -= 1
		}
	} else {
		mod = math.Copysign(0, y)
	}
	var floordiv float64
	if div != 0 {
		floordiv = math.Floor(div)
		if div-floordiv > 0.5 {
			floordiv += 1
		}
	} else {
		floordiv = math.Copysign(0, x/y)
	}
	return floordiv, mod
}

var cmpSymbols = map[string]string{"lt": "<", "le": "<=", "gt": ">", "ge": ">="}

// compareOp evaluates one comparison operator.
func compareOp(op string, a, b Value) (bool, error) {
	switch op {
	case "eq":
		return Equal(a, b), nil
	case "ne":
		return !Equal(a, b), nil
	case "in":
		return contains(b, a)
	case "notin":
		ok, err := contains(b, a)
		return !ok, err
	}
	c, err := compare(a, b)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Kind == TypeError {
			e.Message = "'" + cmpSymbols[op] + "' not supported between instances of '" + a.typeName() + "' and '" + b.typeName() + "'"
		}
		return false, err
	}
	switch op {
	case "lt":
		return c < 0, nil
	case "le":
		return c <= 0, nil
	case "gt":
		return c > 0, nil
	case "ge":
		return c >= 0, nil
	}
	return false, newErr(UnsupportedError, "unknown comparison %s", op)
}

// compare orders two values as Python's < does; it fails for values
// Python cannot order. NaN compares as neither smaller nor larger.
func compare(a, b Value) (int, error) {
	if a.kind == UndefinedKind {
		return 0, undefErr(a)
	}
	if b.kind == UndefinedKind {
		return 0, undefErr(b)
	}
	if a.isNumber() && b.isNumber() {
		if a.kind != FloatKind && b.kind != FloatKind {
			switch {
			case a.i() < b.i():
				return -1, nil
			case a.i() > b.i():
				return 1, nil
			}
			return 0, nil
		}
		x, _ := a.AsFloat()
		y, _ := b.AsFloat()
		switch {
		case x < y:
			return -1, nil
		case x > y:
			return 1, nil
		}
		return 0, nil
	}
	if a.kind == StringKind && b.kind == StringKind {
		return strings.Compare(a.str, b.str), nil
	}
	if a.isSeq() && a.kind == b.kind && !a.isRange() && !b.isRange() {
		x, y := a.list(), b.list()
		for i := 0; i < len(x) && i < len(y); i++ {
			if !Equal(x[i], y[i]) {
				return compare(x[i], y[i])
			}
		}
		switch {
		case len(x) < len(y):
			return -1, nil
		case len(x) > len(y):
			return 1, nil
		}
		return 0, nil
	}
	return 0, newErr(TypeError, "'<' not supported between instances of '%s' and '%s'", a.typeName(), b.typeName())
}

// contains is Python's "item in container".
func contains(container, item Value) (bool, error) {
	switch container.kind {
	case StringKind:
		if item.kind != StringKind {
			return false, newErr(TypeError, "'in <string>' requires string as left operand, not %s", item.typeName())
		}
		return strings.Contains(container.str, item.str), nil
	case ListKind, TupleKind:
		for _, x := range container.list() {
			if Equal(x, item) {
				return true, nil
			}
		}
		return false, nil
	case MapKind:
		if _, ok := keyOf(item); !ok {
			if item.kind == UndefinedKind {
				return false, nil
			}
			return false, newErr(TypeError, "unhashable type: '%s'", item.typeName())
		}
		_, ok := container.ref.(*Map).GetKey(item)
		return ok, nil
	case UndefinedKind:
		return false, nil
	case ObjectKind:
		if it, ok := container.ref.(iterableObject); ok {
			items, err := it.iter()
			for _, x := range items {
				if Equal(x, item) {
					return true, nil
				}
			}
			return false, err
		}
	}
	return false, newErr(TypeError, "argument of type '%s' is not iterable", container.typeName())
}

// pyPercentFormat is Python's str % args for the common conversions.
func pyPercentFormat(format string, args Value) (string, error) {
	// Python treats any argument with __getitem__ (other than a tuple or
	// str) as a mapping: unused arguments are then no error.
	var list []Value
	var mapping *Map
	dictLike := false
	switch args.kind {
	case TupleKind:
		list = args.list()
	case MapKind:
		mapping = args.ref.(*Map)
		list = []Value{args}
		dictLike = true
	case ListKind, UndefinedKind:
		list = []Value{args}
		dictLike = true
	default:
		list = []Value{args}
	}
	next := 0
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", newErr(ValueError, "incomplete format")
		}
		var arg Value
		haveArg := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || mapping == nil {
				switch {
				case args.kind == UndefinedKind:
					return "", undefErr(args)
				case args.kind == ListKind:
					return "", newErr(TypeError, "list indices must be integers or slices, not str")
				case mapping == nil:
					return "", newErr(TypeError, "format requires a mapping")
				}
				return "", newErr(ValueError, "incomplete format key")
			}
			key := format[i+1 : i+end]
			v, ok := mapping.Get(key)
			if !ok {
				return "", newErr(ValueError, "KeyError: %s", pyfmt.Repr(key))
			}
			arg, haveArg = v, true
			i += end + 1
		}
		flags := ""
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			flags += string(format[i])
			i++
		}
		width := -1
		start := i
		for i < len(format) && isDigit(format[i]) {
			i++
		}
		if i > start {
			width, _ = strconv.Atoi(format[start:i])
		}
		prec := -1
		if i < len(format) && format[i] == '.' {
			i++
			start = i
			for i < len(format) && isDigit(format[i]) {
				i++
			}
			prec, _ = strconv.Atoi(format[start:i])
		}
		if i >= len(format) {
			return "", newErr(ValueError, "incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if next >= len(list) {
				return "", newErr(TypeError, "not enough arguments for format string")
			}
			arg = list[next]
			next++
		}
		var s string
		switch conv {
		case 's':
			s = arg.String()
			if arg.kind == UndefinedKind {
				s = ""
			}
			if prec >= 0 && runeLen(s) > prec {
				s = string([]rune(s)[:prec])
			}
		case 'r', 'a':
			s = arg.Repr()
		case 'd', 'i', 'u':
			switch arg.kind {
			case IntKind, BoolKind:
				s = strconv.FormatInt(arg.i(), 10)
			case FloatKind:
				s = strconv.FormatFloat(math.Trunc(arg.f()), 'f', 0, 64)
			case UndefinedKind:
				return "", undefErr(arg)
			default:
				return "", newErr(TypeError, "%%%c format: a real number is required, not %s", conv, arg.typeName())
			}
			if strings.Contains(flags, "+") && !strings.HasPrefix(s, "-") {
				s = "+" + s
			}
		case 'f', 'F', 'e', 'E', 'g', 'G':
			f, ok := arg.AsFloat()
			if arg.kind == UndefinedKind {
				return "", undefErr(arg)
			}
			if !ok {
				return "", newErr(TypeError, "must be real number, not %s", arg.typeName())
			}
			if prec < 0 {
				prec = 6
			}
			switch conv {
			case 'f', 'F':
				s = strconv.FormatFloat(f, 'f', prec, 64)
			case 'e', 'E':
				s = strconv.FormatFloat(f, byte(conv), prec, 64)
				s = fixExponent(s)
			default:
				if prec == 0 {
					prec = 1
				}
				s = strconv.FormatFloat(f, byte(conv), prec, 64)
				s = fixExponent(s)
			}
			if strings.Contains(flags, "+") && f >= 0 {
				s = "+" + s
			}
		case 'x', 'X', 'o':
			n, ok := arg.AsInt()
			if !ok {
				return "", newErr(TypeError, "%%%c format: an integer is required, not %s", conv, arg.typeName())
			}
			base := 16
			if conv == 'o' {
				base = 8
			}
			s = strconv.FormatInt(n, base)
			if conv == 'X' {
				s = strings.ToUpper(s)
			}
		case 'c':
			switch arg.kind {
			case IntKind:
				s = string(rune(arg.i()))
			case StringKind:
				s = arg.str
			default:
				return "", newErr(TypeError, "%%c requires int or char")
			}
		default:
			return "", newErr(ValueError, "unsupported format character '%c' (0x%x) at index %d", conv, conv, i)
		}
		if pad := width - runeLen(s); pad > 0 {
			switch {
			case strings.Contains(flags, "-"):
				s += strings.Repeat(" ", pad)
			case strings.Contains(flags, "0") && conv != 's' && conv != 'r':
				sign := ""
				if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
					sign, s = s[:1], s[1:]
				}
				s = sign + strings.Repeat("0", pad) + s
			default:
				s = strings.Repeat(" ", pad) + s
			}
		}
		b.WriteString(s)
	}
	if !dictLike && next < len(list) {
		return "", newErr(TypeError, "not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// fixExponent turns Go's e+5 exponents into Python's e+05.
func fixExponent(s string) string {
	i := strings.LastIndexAny(s, "eE")
	if i < 0 || i+2 >= len(s) {
		return s
	}
	if len(s)-(i+2) == 1 {
		return s[:i+2] + "0" + s[i+2:]
	}
	return s
}

func absI(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
