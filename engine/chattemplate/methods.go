package chattemplate

import (
	"strconv"
	"strings"
	"unicode"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// Python methods of str, dict, list and tuple that templates call.

// bindArgs binds positional and keyword arguments to parameter names the
// way Python does for a builtin. The result has one entry per name;
// missing optional arguments are left as Undefined with ok false.
func bindArgs(fname string, args []Value, kw []namedArg, names []string, required int) ([]Value, []bool, error) {
	if len(args) > len(names) {
		return nil, nil, newErr(TypeError, "%s() takes at most %d argument(s) (%d given)", fname, len(names), len(args))
	}
	vals := make([]Value, len(names))
	set := make([]bool, len(names))
	for i, a := range args {
		vals[i], set[i] = a, true
	}
	for _, k := range kw {
		found := false
		for i, n := range names {
			if n == k.name {
				if set[i] {
					return nil, nil, newErr(TypeError, "%s() got multiple values for argument '%s'", fname, n)
				}
				vals[i], set[i], found = k.v, true, true
				break
			}
		}
		if !found {
			return nil, nil, newErr(TypeError, "%s() got an unexpected keyword argument '%s'", fname, k.name)
		}
	}
	for i := 0; i < required; i++ {
		if !set[i] {
			return nil, nil, newErr(TypeError, "%s() missing required argument '%s' (pos %d)", fname, names[i], i+1)
		}
	}
	return vals, set, nil
}

func method(self Value, name string, fn func(r *renderer, args []Value, kw []namedArg) (Value, error)) Value {
	return Value{kind: FuncKind, ref: &function{name: name, self: self, fn: fn}}
}

// optInt reads an optional int argument (None counts as absent).
func optInt(v Value, set bool, what string) (*int, error) {
	if !set || v.kind == NoneKind {
		return nil, nil
	}
	if v.kind != IntKind && v.kind != BoolKind {
		return nil, newErr(TypeError, "slice indices must be integers or None or have an __index__ method")
	}
	n := int(v.i())
	return &n, nil
}

func needStr(v Value, fname string, pos int) (string, error) {
	if v.kind != StringKind {
		return "", newErr(TypeError, "%s() argument %d must be str, not %s", fname, pos, v.typeName())
	}
	return v.str, nil
}

// oneStrArg binds the single, required str argument param of method
// fname.
func oneStrArg(fname string, args []Value, kw []namedArg, param string) (string, error) {
	v, _, err := bindArgs(fname, args, kw, []string{param}, 1)
	if err != nil {
		return "", err
	}
	return needStr(v[0], fname, 1)
}

// lookupMethod returns the bound method name of obj, if Python has one.
func lookupMethod(obj Value, name string) (Value, bool) {
	switch obj.kind {
	case StringKind:
		return strMethod(obj, name)
	case MapKind:
		return dictMethod(obj, name)
	case ListKind, TupleKind:
		return seqMethod(obj, name)
	}
	return Value{}, false
}

func strMethod(obj Value, name string) (Value, bool) {
	s := obj.str
	simple := func(f func(string) string) (Value, bool) {
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			if _, _, err := bindArgs(name, args, kw, nil, 0); err != nil {
				return Value{}, err
			}
			return String(f(s)), nil
		}), true
	}
	pred := func(f func(string) bool) (Value, bool) {
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			if _, _, err := bindArgs(name, args, kw, nil, 0); err != nil {
				return Value{}, err
			}
			return Bool(f(s)), nil
		}), true
	}
	switch name {
	case "upper":
		return simple(pyUpper)
	case "lower", "casefold":
		return simple(pyLower)
	case "title":
		return simple(pyTitle)
	case "capitalize":
		return simple(pyCapitalize)
	case "swapcase":
		return simple(pySwapcase)
	case "isdigit", "isnumeric", "isdecimal":
		return pred(func(s string) bool { return allRunes(s, unicode.IsDigit) })
	case "isalpha":
		return pred(func(s string) bool { return allRunes(s, unicode.IsLetter) })
	case "isalnum":
		return pred(func(s string) bool {
			return allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) })
		})
	case "isspace":
		return pred(func(s string) bool { return allRunes(s, pyfmt.IsSpace) })
	case "islower":
		return pred(pyIsLower)
	case "isupper":
		return pred(pyIsUpper)
	case "isascii":
		return pred(isASCII)
	case "strip", "lstrip", "rstrip":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, set, err := bindArgs(name, args, kw, []string{"chars"}, 0)
			if err != nil {
				return Value{}, err
			}
			var chars *string
			if set[0] && v[0].kind != NoneKind {
				if v[0].kind != StringKind {
					return Value{}, newErr(TypeError, "%s arg must be None or str", name)
				}
				chars = &v[0].str
			}
			return String(pyStrip(s, chars, name != "rstrip", name != "lstrip")), nil
		}), true
	case "split", "rsplit":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, set, err := bindArgs(name, args, kw, []string{"sep", "maxsplit"}, 0)
			if err != nil {
				return Value{}, err
			}
			maxsplit := -1
			if set[1] {
				n, err := v[1].needInt()
				if err != nil {
					return Value{}, err
				}
				maxsplit = int(n)
			}
			var parts []string
			if !set[0] || v[0].kind == NoneKind {
				if name == "split" {
					parts = pySplitWhitespace(s, maxsplit)
				} else {
					parts = pyRSplitWhitespace(s, maxsplit)
				}
			} else {
				sep, err := needStr(v[0], name, 1)
				if err != nil {
					return Value{}, err
				}
				if sep == "" {
					return Value{}, newErr(ValueError, "empty separator")
				}
				if name == "split" {
					parts = pySplit(s, sep, maxsplit)
				} else {
					parts = pyRSplit(s, sep, maxsplit)
				}
			}
			if err := r.charge(len(s) + valueSize*len(parts)); err != nil {
				return Value{}, err
			}
			return Strings(parts...), nil
		}), true
	case "splitlines":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, _, err := bindArgs(name, args, kw, []string{"keepends"}, 0)
			if err != nil {
				return Value{}, err
			}
			parts := pySplitlines(s, v[0].Truth())
			if err := r.charge(len(s) + valueSize*len(parts)); err != nil {
				return Value{}, err
			}
			return Strings(parts...), nil
		}), true
	case "startswith", "endswith":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, set, err := bindArgs(name, args, kw, []string{"prefix", "start", "end"}, 1)
			if err != nil {
				return Value{}, err
			}
			start, err := optInt(v[1], set[1], "start")
			if err != nil {
				return Value{}, err
			}
			end, err := optInt(v[2], set[2], "end")
			if err != nil {
				return Value{}, err
			}
			sub := s
			if start != nil || end != nil {
				n := runeLen(s)
				a, b := pyIndexRange(n, start, end)
				if a > n {
					return Bool(false), nil
				}
				if a > b {
					b = a
				}
				sub = runeSubstr(s, a, b)
			}
			var cands []Value
			switch v[0].kind {
			case StringKind:
				cands = []Value{v[0]}
			case TupleKind:
				cands = v[0].list()
			default:
				return Value{}, newErr(TypeError, "%s first arg must be str or a tuple of str, not %s", name, v[0].typeName())
			}
			for _, c := range cands {
				if c.kind != StringKind {
					return Value{}, newErr(TypeError, "tuple for %s must only contain str, not %s", name, c.typeName())
				}
				if name == "startswith" && strings.HasPrefix(sub, c.str) || name == "endswith" && strings.HasSuffix(sub, c.str) {
					return Bool(true), nil
				}
			}
			return Bool(false), nil
		}), true
	case "replace":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, set, err := bindArgs(name, args, kw, []string{"old", "new", "count"}, 2)
			if err != nil {
				return Value{}, err
			}
			old, err := needStr(v[0], name, 1)
			if err != nil {
				return Value{}, err
			}
			nw, err := needStr(v[1], name, 2)
			if err != nil {
				return Value{}, err
			}
			n := -1
			if set[2] {
				c, err := v[2].needInt()
				if err != nil {
					return Value{}, err
				}
				n = int(c)
			}
			return r.replace(s, old, nw, n)
		}), true
	case "find", "rfind", "index", "rindex", "count":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, set, err := bindArgs(name, args, kw, []string{"sub", "start", "end"}, 1)
			if err != nil {
				return Value{}, err
			}
			sub, err := needStr(v[0], name, 1)
			if err != nil {
				return Value{}, err
			}
			start, err := optInt(v[1], set[1], "start")
			if err != nil {
				return Value{}, err
			}
			end, err := optInt(v[2], set[2], "end")
			if err != nil {
				return Value{}, err
			}
			if name == "count" {
				return Int(int64(pyCount(s, sub, start, end))), nil
			}
			i := pyFind(s, sub, start, end, name == "rfind" || name == "rindex")
			if i < 0 && (name == "index" || name == "rindex") {
				return Value{}, newErr(ValueError, "substring not found")
			}
			return Int(int64(i)), nil
		}), true
	case "join":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, _, err := bindArgs(name, args, kw, []string{"iterable"}, 1)
			if err != nil {
				return Value{}, err
			}
			items, err := iterate(v[0])
			if err != nil {
				return Value{}, newErr(TypeError, "can only join an iterable")
			}
			parts := make([]string, len(items))
			n := 0
			for i, it := range items {
				if it.kind != StringKind {
					return Value{}, newErr(TypeError, "sequence item %d: expected str instance, %s found", i, it.typeName())
				}
				parts[i] = it.str
				n += len(it.str) + len(s)
			}
			if err := r.charge(n); err != nil {
				return Value{}, err
			}
			return String(strings.Join(parts, s)), nil
		}), true
	case "removeprefix", "removesuffix":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			a, err := oneStrArg(name, args, kw, "affix")
			if err != nil {
				return Value{}, err
			}
			if name == "removeprefix" {
				return String(strings.TrimPrefix(s, a)), nil
			}
			return String(strings.TrimSuffix(s, a)), nil
		}), true
	case "partition", "rpartition":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			sep, err := oneStrArg(name, args, kw, "sep")
			if err != nil {
				return Value{}, err
			}
			if sep == "" {
				return Value{}, newErr(ValueError, "empty separator")
			}
			var i int
			if name == "partition" {
				i = strings.Index(s, sep)
				if i < 0 {
					return Tuple(String(s), String(""), String("")), nil
				}
			} else {
				i = strings.LastIndex(s, sep)
				if i < 0 {
					return Tuple(String(""), String(""), String(s)), nil
				}
			}
			return Tuple(String(s[:i]), String(sep), String(s[i+len(sep):])), nil
		}), true
	case "zfill", "ljust", "rjust", "center":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			names := []string{"width", "fillchar"}
			if name == "zfill" {
				names = names[:1]
			}
			v, set, err := bindArgs(name, args, kw, names, 1)
			if err != nil {
				return Value{}, err
			}
			w, err := v[0].needInt()
			if err != nil {
				return Value{}, err
			}
			if w > int64(r.lim.MaxOutputBytes) {
				return Value{}, newErr(LimitError, "%s width too large", name)
			}
			fill := " "
			if len(set) > 1 && set[1] {
				if v[1].kind != StringKind || runeLen(v[1].str) != 1 {
					return Value{}, newErr(TypeError, "The fill character must be exactly one character long")
				}
				fill = v[1].str
			}
			return String(pyPad(s, int(w), fill, name)), nil
		}), true
	case "format":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			out, err := pyStrFormat(s, args, kw)
			if err != nil {
				return Value{}, err
			}
			if err := r.charge(len(out)); err != nil {
				return Value{}, err
			}
			return String(out), nil
		}), true
	}
	return Value{}, false
}

// replace is str.replace with the allocation bound.
func (r *renderer) replace(s, old, nw string, n int) (Value, error) {
	count := pyCount(s, old, nil, nil)
	if n >= 0 && n < count {
		count = n
	}
	size := len(s) + count*(len(nw)-len(old))
	if err := r.charge(size); err != nil {
		return Value{}, err
	}
	return String(strings.Replace(s, old, nw, n)), nil
}

// pyPad is str.zfill/ljust/rjust/center.
func pyPad(s string, width int, fill, how string) string {
	n := runeLen(s)
	if width <= n {
		return s
	}
	pad := width - n
	switch how {
	case "ljust":
		return s + strings.Repeat(fill, pad)
	case "rjust":
		return strings.Repeat(fill, pad) + s
	case "center":
		left := pad/2 + (pad & width & 1)
		return strings.Repeat(fill, left) + s + strings.Repeat(fill, pad-left)
	}
	// zfill
	sign := ""
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		sign, s = s[:1], s[1:]
	}
	return sign + strings.Repeat("0", pad) + s
}

// pyStrFormat is str.format for "{}", "{0}" and "{name}" fields with an
// optional !s/!r conversion and a simple format spec
// ([[fill]align][sign][0][width][.precision][s|d|f|e|g|%]).
func pyStrFormat(f string, args []Value, kw []namedArg) (string, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch c {
		case '{':
			if i+1 < len(f) && f[i+1] == '{' {
				b.WriteByte('{')
				i++
				continue
			}
			end := strings.IndexByte(f[i:], '}')
			if end < 0 {
				return "", newErr(ValueError, "Single '{' encountered in format string")
			}
			field := f[i+1 : i+end]
			i += end
			name, spec, conv := field, "", byte(0)
			if k := strings.IndexByte(name, ':'); k >= 0 {
				name, spec = name[:k], name[k+1:]
			}
			if k := strings.IndexByte(name, '!'); k >= 0 {
				if k+1 < len(name) {
					conv = name[k+1]
				}
				name = name[:k]
			}
			if k := strings.IndexAny(name, ".["); k >= 0 {
				return "", newErr(UnsupportedError, "str.format field %q is not supported", field)
			}
			var v Value
			switch {
			case name == "":
				if auto >= len(args) {
					return "", newErr(ValueError, "Replacement index %d out of range for positional args tuple", auto)
				}
				v = args[auto]
				auto++
			case isDigit(name[0]):
				n, err := strconv.Atoi(name)
				if err != nil || n >= len(args) {
					return "", newErr(ValueError, "Replacement index %s out of range for positional args tuple", name)
				}
				v = args[n]
			default:
				found := false
				for _, k := range kw {
					if k.name == name {
						v, found = k.v, true
					}
				}
				if !found {
					return "", newErr(ValueError, "%s", pyfmt.Repr(name))
				}
			}
			switch conv {
			case 'r', 'a':
				v = String(v.Repr())
			case 's':
				v = String(v.String())
			}
			s, err := pyFormatSpec(v, spec)
			if err != nil {
				return "", err
			}
			b.WriteString(s)
		case '}':
			if i+1 < len(f) && f[i+1] == '}' {
				i++
			} else {
				return "", newErr(ValueError, "Single '}' encountered in format string")
			}
			b.WriteByte('}')
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// pyFormatSpec is format(v, spec) for the common specs.
func pyFormatSpec(v Value, spec string) (string, error) {
	if spec == "" {
		return v.String(), nil
	}
	i := 0
	fill, align := " ", byte(0)
	if len(spec) >= 2 && strings.IndexByte("<>^=", spec[1]) >= 0 {
		fill, align, i = spec[:1], spec[1], 2
	} else if strings.IndexByte("<>^=", spec[0]) >= 0 {
		align, i = spec[0], 1
	}
	sign := byte('-')
	if i < len(spec) && strings.IndexByte("+- ", spec[i]) >= 0 {
		sign = spec[i]
		i++
	}
	if i < len(spec) && spec[i] == '0' && align == 0 {
		fill, align = "0", '='
		i++
	}
	w0 := i
	for i < len(spec) && isDigit(spec[i]) {
		i++
	}
	width, _ := strconv.Atoi(spec[w0:i])
	prec := -1
	if i < len(spec) && spec[i] == '.' {
		i++
		p0 := i
		for i < len(spec) && isDigit(spec[i]) {
			i++
		}
		prec, _ = strconv.Atoi(spec[p0:i])
	}
	typ := byte(0)
	if i < len(spec) {
		typ = spec[i]
		i++
	}
	if i != len(spec) {
		return "", newErr(UnsupportedError, "format spec %q is not supported", spec)
	}
	var s string
	numeric := false
	switch {
	case v.kind == StringKind && (typ == 0 || typ == 's'):
		s = v.str
		if prec >= 0 && runeLen(s) > prec {
			s = string([]rune(s)[:prec])
		}
	case v.isNumber() && typ != 's':
		numeric = true
		f, _ := v.AsFloat()
		switch typ {
		case 0:
			if v.kind == FloatKind && prec >= 0 {
				s = fixExponent(strconv.FormatFloat(f, 'g', prec, 64))
			} else if v.kind == FloatKind {
				s = pyfmt.FloatRepr(f)
			} else {
				s = strconv.FormatInt(v.i(), 10)
			}
		case 'd':
			if v.kind == FloatKind {
				return "", newErr(ValueError, "Unknown format code 'd' for object of type 'float'")
			}
			s = strconv.FormatInt(v.i(), 10)
		case 'f', 'F', 'e', 'E', 'g', 'G', '%':
			if prec < 0 {
				prec = 6
			}
			switch typ {
			case '%':
				s = strconv.FormatFloat(f*100, 'f', prec, 64) + "%"
			case 'f', 'F':
				s = strconv.FormatFloat(f, 'f', prec, 64)
			default:
				s = fixExponent(strconv.FormatFloat(f, typ, prec, 64))
			}
		default:
			return "", newErr(UnsupportedError, "format spec %q is not supported", spec)
		}
		if sign != '-' && !strings.HasPrefix(s, "-") {
			s = string(sign) + s
		}
	default:
		return "", newErr(UnsupportedError, "format spec %q for %s is not supported", spec, v.typeName())
	}
	pad := width - runeLen(s)
	if pad <= 0 {
		return s, nil
	}
	if align == 0 {
		align = '<'
		if numeric {
			align = '>'
		}
	}
	switch align {
	case '<':
		return s + strings.Repeat(fill, pad), nil
	case '^':
		return strings.Repeat(fill, pad/2) + s + strings.Repeat(fill, pad-pad/2), nil
	case '=':
		if numeric && (strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") || strings.HasPrefix(s, " ")) {
			return s[:1] + strings.Repeat(fill, pad) + s[1:], nil
		}
	}
	return strings.Repeat(fill, pad) + s, nil
}

func dictMethod(obj Value, name string) (Value, bool) {
	m := obj.ref.(*Map)
	switch name {
	case "items", "keys", "values":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			if _, _, err := bindArgs(name, args, kw, nil, 0); err != nil {
				return Value{}, err
			}
			switch name {
			case "keys":
				return newView("dict_keys", append([]Value(nil), m.keys...)), nil
			case "values":
				return newView("dict_values", append([]Value(nil), m.vals...)), nil
			}
			out := make([]Value, len(m.keys))
			for i := range m.keys {
				out[i] = Tuple(m.keys[i], m.vals[i])
			}
			return newView("dict_items", out), nil
		}), true
	case "get":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			if len(kw) > 0 {
				return Value{}, newErr(TypeError, "get() takes no keyword arguments")
			}
			if len(args) < 1 || len(args) > 2 {
				return Value{}, newErr(TypeError, "get expected 1 or 2 arguments, got %d", len(args))
			}
			if _, ok := keyOf(args[0]); !ok && args[0].kind != UndefinedKind {
				return Value{}, newErr(TypeError, "unhashable type: '%s'", args[0].typeName())
			}
			if v, ok := m.GetKey(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return None(), nil
		}), true
	case "copy":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			return MapValue(m.Clone()), nil
		}), true
	}
	return Value{}, false
}

func seqMethod(obj Value, name string) (Value, bool) {
	l := obj.list()
	switch name {
	case "count":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, _, err := bindArgs(name, args, kw, []string{"value"}, 1)
			if err != nil {
				return Value{}, err
			}
			n := 0
			for _, x := range l {
				if Equal(x, v[0]) {
					n++
				}
			}
			return Int(int64(n)), nil
		}), true
	case "index":
		return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v, _, err := bindArgs(name, args, kw, []string{"value", "start", "stop"}, 1)
			if err != nil {
				return Value{}, err
			}
			for i, x := range l {
				if Equal(x, v[0]) {
					return Int(int64(i)), nil
				}
			}
			return Value{}, newErr(ValueError, "%s is not in %s", v[0].Repr(), obj.typeName())
		}), true
	case "copy":
		if obj.kind == ListKind && !obj.isRange() {
			return method(obj, name, func(r *renderer, args []Value, kw []namedArg) (Value, error) {
				return List(append([]Value(nil), l...)...), nil
			}), true
		}
	}
	return Value{}, false
}
