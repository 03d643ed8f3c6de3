package chattemplate

import (
	"html"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

type filterFunc func(r *renderer, v Value, args []Value, kw []namedArg) (Value, error)

// knownJinjaFilters are Jinja2's built-in filter names. A template that
// uses one this package does not implement compiles and fails only when
// the filter runs; unknown names fail at compile time as in Jinja2.
var knownJinjaFilters = map[string]bool{
	"abs": true, "attr": true, "batch": true, "capitalize": true, "center": true, "count": true,
	"d": true, "default": true, "dictsort": true, "e": true, "escape": true, "filesizeformat": true,
	"first": true, "float": true, "forceescape": true, "format": true, "groupby": true, "indent": true,
	"int": true, "items": true, "join": true, "last": true, "length": true, "list": true, "lower": true,
	"map": true, "max": true, "min": true, "pprint": true, "random": true, "reject": true,
	"rejectattr": true, "replace": true, "reverse": true, "round": true, "safe": true, "select": true,
	"selectattr": true, "slice": true, "sort": true, "string": true, "striptags": true, "sum": true,
	"title": true, "tojson": true, "trim": true, "truncate": true, "unique": true, "upper": true,
	"urlencode": true, "urlize": true, "wordcount": true, "wordwrap": true, "xmlattr": true,
}

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":        filterAbs,
		"attr":       filterAttr,
		"capitalize": strFilter("capitalize", pyCapitalize),
		"center":     filterCenter,
		"count":      filterLength,
		"d":          filterDefault,
		"default":    filterDefault,
		"dictsort":   filterDictsort,
		"e":          filterEscape,
		"escape":     filterEscape,
		"first":      filterFirst,
		"float":      filterFloat,
		"format":     filterFormat,
		"indent":     filterIndent,
		"int":        filterInt,
		"items":      lazy(filterItems),
		"join":       filterJoin,
		"last":       filterLast,
		"length":     filterLength,
		"list":       filterList,
		"lower":      strFilter("lower", pyLower),
		"batch":      lazy(filterBatch),
		"map":        lazy(filterMap),
		"max":        filterMinMax(true),
		"min":        filterMinMax(false),
		"reject":     lazy(filterSelect(false, false)),
		"rejectattr": lazy(filterSelect(false, true)),
		"replace":    filterReplace,
		"reverse":    filterReverse,
		"round":      filterRound,
		"safe":       filterString,
		"select":     lazy(filterSelect(true, false)),
		"selectattr": lazy(filterSelect(true, true)),
		"slice":      lazy(filterSlice),
		"sort":       filterSort,
		"string":     filterString,
		"sum":        filterSum,
		"title":      strFilter("title", jinjaTitle),
		"tojson":     filterToJSON,
		"trim":       filterTrim,
		"unique":     lazy(filterUnique),
		"upper":      strFilter("upper", pyUpper),
		"wordcount":  filterWordcount,
	}
}

// lazy turns a filter into one that returns a generator: like Jinja2's
// generator filters, it does its work, and raises its errors, only when
// the result is iterated.
func lazy(f filterFunc) filterFunc {
	return func(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
		return lazyGenerator(func() ([]Value, error) {
			out, err := f(r, v, args, kw)
			if err != nil {
				return nil, err
			}
			return iterate(out)
		}), nil
	}
}

func filterBatch(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("batch", args, kw, []string{"linecount", "fill_with"}, 1)
	if err != nil {
		return Value{}, err
	}
	n, err := a[0].needInt()
	if err != nil {
		return Value{}, err
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	var out []Value
	var tmp []Value
	for _, it := range items {
		if int64(len(tmp)) == n {
			out = append(out, List(tmp...))
			tmp = nil
		}
		tmp = append(tmp, it)
	}
	if len(tmp) > 0 {
		if set[1] && a[1].kind != NoneKind {
			for int64(len(tmp)) < n {
				tmp = append(tmp, a[1])
			}
		}
		out = append(out, List(tmp...))
	}
	return List(out...), r.charge(valueSize * len(items))
}

func filterSlice(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("slice", args, kw, []string{"slices", "fill_with"}, 1)
	if err != nil {
		return Value{}, err
	}
	slices, err := a[0].needInt()
	if err != nil {
		return Value{}, err
	}
	if slices > int64(r.lim.MaxRange) {
		return Value{}, newErr(LimitError, "too many slices")
	}
	seq, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	if slices <= 0 {
		if slices == 0 {
			return Value{}, newErr(ValueError, "integer division or modulo by zero")
		}
		return List(), nil
	}
	n := int64(len(seq))
	per, extra := n/slices, n%slices
	offset := int64(0)
	var out []Value
	for i := int64(0); i < slices; i++ {
		start := offset + i*per
		if i < extra {
			offset++
		}
		end := offset + (i+1)*per
		tmp := append([]Value(nil), seq[start:end]...)
		if set[1] && a[1].kind != NoneKind && i >= extra {
			tmp = append(tmp, a[1])
		}
		out = append(out, List(tmp...))
	}
	return List(out...), r.charge(valueSize * len(seq))
}

// softStr is Jinja2's soft_str: str() of the value (Undefined → "").
func softStr(v Value) string { return v.String() }

func strFilter(name string, f func(string) string) filterFunc {
	return func(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
		if _, _, err := bindArgs(name, args, kw, nil, 0); err != nil {
			return Value{}, err
		}
		return String(f(softStr(v))), nil
	}
}

func filterString(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	if _, _, err := bindArgs("string", args, kw, nil, 0); err != nil {
		return Value{}, err
	}
	if v.kind == StringKind {
		return v, nil
	}
	return String(softStr(v)), nil
}

func filterEscape(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	s := softStr(v)
	s = html.EscapeString(s) // &amp; &lt; &gt; &#34; &#39;
	return String(s), nil
}

func filterTrim(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("trim", args, kw, []string{"chars"}, 0)
	if err != nil {
		return Value{}, err
	}
	var chars *string
	if set[0] && a[0].kind != NoneKind {
		if a[0].kind != StringKind {
			return Value{}, newErr(TypeError, "strip arg must be None or str")
		}
		chars = &a[0].str
	}
	return String(pyStrip(softStr(v), chars, true, true)), nil
}

func filterReplace(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("replace", args, kw, []string{"old", "new", "count"}, 2)
	if err != nil {
		return Value{}, err
	}
	n := -1
	if set[2] && a[2].kind != NoneKind {
		c, err := a[2].needInt()
		if err != nil {
			return Value{}, err
		}
		n = int(c)
	}
	return r.replace(softStr(v), softStr(a[0]), softStr(a[1]), n)
}

func filterCenter(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("center", args, kw, []string{"width"}, 0)
	if err != nil {
		return Value{}, err
	}
	w := int64(80)
	if set[0] {
		if w, err = a[0].needInt(); err != nil {
			return Value{}, err
		}
	}
	if w > int64(r.lim.MaxOutputBytes) {
		return Value{}, newErr(LimitError, "center width too large")
	}
	return String(pyPad(softStr(v), int(w), " ", "center")), nil
}

func filterFormat(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	if len(args) > 0 && len(kw) > 0 {
		return Value{}, newErr(ValueError, "can't handle positional and keyword arguments at the same time")
	}
	var arg Value
	if len(kw) > 0 {
		m := NewMap()
		for _, k := range kw {
			m.Set(k.name, k.v)
		}
		arg = MapValue(m)
	} else {
		arg = Tuple(args...)
	}
	s, err := pyPercentFormat(softStr(v), arg)
	if err != nil {
		return Value{}, err
	}
	return String(s), r.charge(len(s))
}

func filterWordcount(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	n := 0
	in := false
	for _, c := range softStr(v) {
		w := isNameRune(c)
		if w && !in {
			n++
		}
		in = w
	}
	return Int(int64(n)), nil
}

func filterIndent(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("indent", args, kw, []string{"width", "first", "blank"}, 0)
	if err != nil {
		return Value{}, err
	}
	ind := "    "
	if set[0] {
		switch a[0].kind {
		case StringKind:
			ind = a[0].str
		case IntKind, BoolKind:
			if a[0].i() > int64(r.lim.MaxOutputBytes) {
				return Value{}, newErr(LimitError, "indent width too large")
			}
			ind = spaces(int(a[0].i()))
		default:
			return Value{}, newErr(TypeError, "can't multiply sequence by non-int of type '%s'", a[0].typeName())
		}
	}
	switch v.kind {
	case StringKind:
	case UndefinedKind:
		return Value{}, undefErr(v)
	case ListKind:
		if v.isRange() {
			return Value{}, newErr(TypeError, "unsupported operand type(s) for +=: 'range' and 'str'")
		}
		return Value{}, newErr(AttributeError, "'list' object has no attribute 'splitlines'")
	default:
		return Value{}, newErr(TypeError, "unsupported operand type(s) for +=: '%s' and 'str'", v.typeName())
	}
	s := v.str + "\n"
	lines := pySplitlines(s, false)
	var b strings.Builder
	if a[2].Truth() {
		b.WriteString(strings.Join(lines, "\n"+ind))
	} else {
		b.WriteString(lines[0])
		for _, l := range lines[1:] {
			b.WriteByte('\n')
			if l != "" {
				b.WriteString(ind)
			}
			b.WriteString(l)
		}
	}
	out := b.String()
	if a[1].Truth() {
		out = ind + out
	}
	return String(out), r.charge(len(out))
}

func filterDefault(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("default", args, kw, []string{"default_value", "boolean"}, 0)
	if err != nil {
		return Value{}, err
	}
	def := String("")
	if set[0] {
		def = a[0]
	}
	if v.kind == UndefinedKind || (a[1].Truth() && !v.Truth()) {
		return def, nil
	}
	return v, nil
}

func filterLength(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	switch v.kind {
	case StringKind:
		return Int(int64(runeLen(v.str))), nil
	case ListKind, TupleKind:
		return Int(int64(len(v.list()))), nil
	case MapKind:
		return Int(int64(v.ref.(*Map).Len())), nil
	case UndefinedKind:
		return Int(0), nil
	case ObjectKind:
		if s, ok := v.ref.(sizedObject); ok {
			return Int(int64(s.length())), nil
		}
	}
	return Value{}, newErr(TypeError, "object of type '%s' has no len()", v.typeName())
}

func filterList(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	if err := r.charge(valueSize * len(items)); err != nil {
		return Value{}, err
	}
	return List(append([]Value(nil), items...)...), nil
}

func filterFirst(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	if len(items) == 0 {
		return undefinedHint("No first item, sequence was empty."), nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	switch v.kind {
	case ListKind, TupleKind, StringKind, MapKind, UndefinedKind:
	default:
		if _, ok := v.ref.(*viewObj); !ok {
			return Value{}, newErr(TypeError, "'%s' object is not reversible", v.typeName())
		}
	}
	items, _ := iterate(v)
	if len(items) == 0 {
		return undefinedHint("No last item, sequence was empty."), nil
	}
	return items[len(items)-1], nil
}

func filterReverse(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	if v.kind == StringKind {
		rs := []rune(v.str)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return String(string(rs)), nil
	}
	reversible := v.kind == ListKind || v.kind == TupleKind || v.kind == MapKind || v.kind == UndefinedKind
	if _, ok := v.ref.(*viewObj); ok {
		reversible = true
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, newErr(RuntimeError, "argument must be iterable")
	}
	out := make([]Value, len(items))
	for i, x := range items {
		out[len(items)-1-i] = x
	}
	if err := r.charge(valueSize * len(out)); err != nil {
		return Value{}, err
	}
	if reversible {
		// reversed(value): a one-shot iterator.
		typ := map[Kind]string{ListKind: "list_reverseiterator", TupleKind: "reversed", MapKind: "dict_reversekeyiterator", UndefinedKind: "reversed"}[v.kind]
		if v.isRange() {
			typ = "range_iterator"
		} else if typ == "" {
			typ = v.typeName() + "_reverseiterator"
		}
		return newGenerator(typ, out), nil
	}
	return List(out...), nil
}

func filterJoin(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("join", args, kw, []string{"d", "attribute"}, 0)
	if err != nil {
		return Value{}, err
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	if set[1] && a[1].kind != NoneKind {
		get := attrGetter(a[1], Value{}, false)
		mapped := make([]Value, len(items))
		for i, it := range items {
			if mapped[i], err = get(it); err != nil {
				return Value{}, err
			}
		}
		items = mapped
	}
	sep := ""
	if set[0] {
		sep = softStr(a[0])
	}
	var b strings.Builder
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(softStr(it))
		if b.Len() > r.lim.MaxOutputBytes {
			return Value{}, newErr(LimitError, "join result exceeds %d bytes", r.lim.MaxOutputBytes)
		}
	}
	return String(b.String()), r.charge(b.Len())
}

func filterAbs(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	switch v.kind {
	case IntKind, BoolKind:
		if v.i() == math.MinInt64 {
			return Value{}, overflow()
		}
		return Int(absI(v.i())), nil
	case FloatKind:
		return Float(math.Abs(v.f())), nil
	}
	return Value{}, newErr(TypeError, "bad operand type for abs(): '%s'", v.typeName())
}

func filterInt(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("int", args, kw, []string{"default", "base"}, 0)
	if err != nil {
		return Value{}, err
	}
	def := Int(0)
	if set[0] {
		def = a[0]
	}
	base := 10
	if set[1] {
		b, ok := a[1].AsInt()
		if !ok {
			return Value{}, newErr(TypeError, "base must be an int")
		}
		base = int(b)
	}
	switch v.kind {
	case UndefinedKind:
		return Value{}, undefErr(v) // int(Undefined) raises
	case IntKind:
		return v, nil
	case BoolKind:
		return Int(v.i()), nil
	case FloatKind:
		f := v.f()
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 9.2e18 {
			return def, nil
		}
		return Int(int64(f)), nil
	case StringKind:
		s := strings.TrimFunc(v.str, pyfmt.IsSpace)
		clean := strings.ReplaceAll(s, "_", "")
		if base == 10 {
			if n, err := strconv.ParseInt(clean, 10, 64); err == nil {
				return Int(n), nil
			}
		} else if n, err := strconv.ParseInt(clean, base, 64); err == nil {
			return Int(n), nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) && math.Abs(f) < 9.2e18 {
			return Int(int64(f)), nil
		}
	}
	return def, nil
}

func filterFloat(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("float", args, kw, []string{"default"}, 0)
	if err != nil {
		return Value{}, err
	}
	def := Float(0)
	if set[0] {
		def = a[0]
	}
	switch v.kind {
	case UndefinedKind:
		return Value{}, undefErr(v) // float(Undefined) raises
	case FloatKind:
		return v, nil
	case IntKind, BoolKind:
		return Float(float64(v.i())), nil
	case StringKind:
		s := strings.ToLower(strings.TrimFunc(v.str, pyfmt.IsSpace))
		switch strings.TrimLeft(s, "+-") {
		case "inf", "infinity", "nan":
		default:
			if strings.ContainsAny(s, "xpn") {
				return def, nil
			}
		}
		if f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64); err == nil || math.IsInf(f, 0) {
			return Float(f), nil
		}
	}
	return def, nil
}

func filterRound(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("round", args, kw, []string{"precision", "method"}, 0)
	if err != nil {
		return Value{}, err
	}
	prec := int64(0)
	if set[0] {
		if prec, err = a[0].needInt(); err != nil {
			return Value{}, err
		}
	}
	how := "common"
	if set[1] {
		how = softStr(a[1])
	}
	f, ok := v.AsFloat()
	if !ok {
		return Value{}, newErr(TypeError, "type %s doesn't define __round__ method", v.typeName())
	}
	switch how {
	case "common":
		if v.kind != FloatKind {
			if prec >= 0 {
				return Int(v.i()), nil
			}
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return Float(f), nil
		}
		if prec < 0 || prec > 300 {
			p := math.Pow(10, float64(-prec))
			return Float(math.RoundToEven(f/p) * p), nil
		}
		s := strconv.FormatFloat(f, 'f', int(prec), 64)
		g, _ := strconv.ParseFloat(s, 64)
		return Float(g), nil
	case "ceil", "floor":
		p := math.Pow(10, float64(prec))
		if how == "ceil" {
			return Float(math.Ceil(f*p) / p), nil
		}
		return Float(math.Floor(f*p) / p), nil
	}
	return Value{}, newErr(TypeError, "method must be common, ceil or floor")
}

func filterItems(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	if v.kind == UndefinedKind {
		return newGenerator("generator", nil), nil
	}
	m := v.AsMap()
	if m == nil {
		return Value{}, newErr(TypeError, "Can only get item pairs from a mapping.")
	}
	out := make([]Value, m.Len())
	for i := range m.keys {
		out[i] = Tuple(m.keys[i], m.vals[i])
	}
	return newGenerator("generator", out), r.charge(2 * valueSize * len(out))
}

func filterDictsort(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, _, err := bindArgs("dictsort", args, kw, []string{"case_sensitive", "by", "reverse"}, 0)
	if err != nil {
		return Value{}, err
	}
	m := v.AsMap()
	if m == nil {
		if v.kind == UndefinedKind {
			return Value{}, undefErr(v)
		}
		return Value{}, newErr(AttributeError, "'%s' object has no attribute 'items'", v.typeName())
	}
	pos := 0
	if a[1].kind == StringKind {
		switch a[1].str {
		case "key":
		case "value":
			pos = 1
		default:
			return Value{}, newErr(ValueError, "You can only sort by either \"key\" or \"value\"")
		}
	}
	items := make([]Value, m.Len())
	keys := make([]Value, m.Len())
	for i := range m.keys {
		items[i] = Tuple(m.keys[i], m.vals[i])
		keys[i] = items[i].list()[pos]
		if !a[0].Truth() && keys[i].kind == StringKind {
			keys[i] = String(pyLower(keys[i].str))
		}
	}
	out, err := sortByKeys(items, keys, a[2].Truth(), false)
	return List(out...), err
}

// sortByKeys is Python's sorted(items, key=..., reverse=...) (stable).
// listKeys says the keys are wrapped in one-element lists (Jinja2's
// make_multi_attrgetter), so equal keys never reach "<".
func sortByKeys(items, keys []Value, reverse, listKeys bool) ([]Value, error) {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var err error
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		if listKeys && Equal(a, b) {
			return false
		}
		c, e := compare(a, b)
		if e != nil && err == nil {
			err = e
		}
		return c < 0
	})
	if err != nil {
		return nil, err
	}
	out := make([]Value, len(items))
	for i, k := range idx {
		out[i] = items[k]
	}
	return out, nil
}

// attrGetter is Jinja2's make_attrgetter: a dotted attribute path whose
// parts are looked up with getitem (integers as indexes); lowercase
// folds strings for case-insensitive comparisons.
func attrGetter(attr Value, def Value, lowercase bool) func(Value) (Value, error) {
	var parts []Value
	if attr.kind == StringKind {
		for _, p := range strings.Split(attr.str, ".") {
			if n, err := strconv.Atoi(p); err == nil {
				parts = append(parts, Int(int64(n)))
			} else {
				parts = append(parts, String(p))
			}
		}
	} else {
		parts = []Value{attr}
	}
	return func(item Value) (Value, error) {
		var err error
		for _, p := range parts {
			if item, err = getItem(item, p); err != nil {
				return Value{}, err
			}
		}
		if item.kind == UndefinedKind && def.kind != UndefinedKind {
			item = def
		}
		if lowercase && item.kind == StringKind {
			item = String(pyLower(item.str))
		}
		return item, nil
	}
}

func filterSort(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("sort", args, kw, []string{"reverse", "case_sensitive", "attribute"}, 0)
	if err != nil {
		return Value{}, err
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	var get func(Value) (Value, error)
	if set[2] && a[2].kind != NoneKind {
		get = attrGetter(a[2], Value{}, !a[1].Truth())
	} else {
		lower := !a[1].Truth()
		get = func(x Value) (Value, error) {
			if lower && x.kind == StringKind {
				return String(pyLower(x.str)), nil
			}
			return x, nil
		}
	}
	keys := make([]Value, len(items))
	for i, it := range items {
		if keys[i], err = get(it); err != nil {
			return Value{}, err
		}
	}
	out, err := sortByKeys(items, keys, a[0].Truth(), true)
	if err != nil {
		return Value{}, err
	}
	return List(out...), r.charge(valueSize * len(out))
}

func filterUnique(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("unique", args, kw, []string{"case_sensitive", "attribute"}, 0)
	if err != nil {
		return Value{}, err
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	attr := Value{}
	if set[1] {
		attr = a[1]
	}
	lower := !a[0].Truth()
	get := func(x Value) (Value, error) {
		if lower && x.kind == StringKind {
			return String(pyLower(x.str)), nil
		}
		return x, nil
	}
	if attr.kind != UndefinedKind && attr.kind != NoneKind {
		get = attrGetter(attr, Value{}, lower)
	}
	seen := NewMap()
	var out []Value
	for _, it := range items {
		k, err := get(it)
		if err != nil {
			return Value{}, err
		}
		if _, ok := keyOf(k); !ok {
			return Value{}, newErr(TypeError, "unhashable type: '%s'", k.typeName())
		}
		if _, dup := seen.GetKey(k); dup {
			continue
		}
		seen.SetKey(k, None())
		out = append(out, it)
	}
	return newGenerator("generator", out), nil
}

func filterMinMax(isMax bool) filterFunc {
	name := "min"
	if isMax {
		name = "max"
	}
	return func(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
		a, set, err := bindArgs(name, args, kw, []string{"case_sensitive", "attribute"}, 0)
		if err != nil {
			return Value{}, err
		}
		items, err := iterate(v)
		if err != nil {
			return Value{}, err
		}
		if len(items) == 0 {
			return undefinedHint("No aggregated item, sequence was empty."), nil
		}
		lower := !a[0].Truth()
		get := func(x Value) (Value, error) {
			if lower && x.kind == StringKind {
				return String(pyLower(x.str)), nil
			}
			return x, nil
		}
		if set[1] && a[1].kind != NoneKind {
			get = attrGetter(a[1], Value{}, lower)
		}
		best := items[0]
		bk, err := get(best)
		if err != nil {
			return Value{}, err
		}
		for _, it := range items[1:] {
			k, err := get(it)
			if err != nil {
				return Value{}, err
			}
			c, err := compare(k, bk)
			if err != nil {
				return Value{}, err
			}
			if (isMax && c > 0) || (!isMax && c < 0) {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func filterSum(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("sum", args, kw, []string{"attribute", "start"}, 0)
	if err != nil {
		return Value{}, err
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	total := Int(0)
	if set[1] {
		total = a[1]
	}
	var get func(Value) (Value, error)
	if set[0] && a[0].kind != NoneKind {
		get = attrGetter(a[0], Value{}, false)
	}
	for _, it := range items {
		if get != nil {
			if it, err = get(it); err != nil {
				return Value{}, err
			}
		}
		if total, err = r.binaryOp("+", total, it); err != nil {
			return Value{}, err
		}
	}
	return total, nil
}

func filterAttr(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, _, err := bindArgs("attr", args, kw, []string{"name"}, 1)
	if err != nil {
		return Value{}, err
	}
	name := softStr(a[0])
	switch v.kind {
	case NamespaceKind, ObjectKind:
		return getAttr(v, name)
	case UndefinedKind:
		return Value{}, undefErr(v)
	}
	if m, ok := lookupMethod(v, name); ok {
		return m, nil
	}
	return undefinedAttr(v, String(name)), nil
}

// filterMap is Jinja2's map filter: map(attribute=...) or
// map('filter', args...).
func filterMap(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	if !v.Truth() {
		return newGenerator("generator", nil), nil
	}
	items, err := iterate(v)
	if err != nil {
		return Value{}, err
	}
	var f func(Value) (Value, error)
	if len(args) == 0 {
		var attr, def Value
		found := false
		for _, k := range kw {
			switch k.name {
			case "attribute":
				attr, found = k.v, true
			case "default":
				def = k.v
			default:
				return Value{}, newErr(ValueError, "Unexpected keyword argument '%s'", k.name)
			}
		}
		if !found {
			return Value{}, newErr(ValueError, "map requires a filter argument")
		}
		f = attrGetter(attr, def, false)
	} else {
		name := softStr(args[0])
		rest := args[1:]
		if _, ok := filters[name]; !ok {
			if knownJinjaFilters[name] {
				return Value{}, newErr(UnsupportedError, "filter '%s' is not supported", name)
			}
			return Value{}, newErr(ValueError, "No filter named '%s'.", name)
		}
		f = func(x Value) (Value, error) { return r.callFilter(name, x, rest, kw) }
	}
	out := make([]Value, len(items))
	for i, it := range items {
		if out[i], err = f(it); err != nil {
			return Value{}, err
		}
	}
	return newGenerator("generator", out), r.charge(valueSize * len(out))
}

// filterSelect implements select/reject (attr false) and
// selectattr/rejectattr (attr true).
func filterSelect(keep, attr bool) filterFunc {
	return func(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
		if !v.Truth() {
			return List(), nil // select_or_reject: "if value:"
		}
		items, err := iterate(v)
		if err != nil {
			return Value{}, err
		}
		var get func(Value) (Value, error)
		if attr {
			if len(args) == 0 {
				return Value{}, newErr(TypeError, "Missing parameter for attribute name")
			}
			get = attrGetter(args[0], Value{}, false)
			args = args[1:]
		}
		var test func(Value) (bool, error)
		if len(args) == 0 {
			test = func(x Value) (bool, error) { return x.Truth(), nil }
		} else {
			name := softStr(args[0])
			rest := args[1:]
			if _, ok := tests[name]; !ok {
				if knownJinjaTests[name] {
					return Value{}, newErr(UnsupportedError, "test '%s' is not supported", name)
				}
				return Value{}, newErr(ValueError, "No test named '%s'.", name)
			}
			test = func(x Value) (bool, error) { return r.callTest(name, x, rest, kw) }
		}
		var out []Value
		for _, it := range items {
			x := it
			if get != nil {
				if x, err = get(it); err != nil {
					return Value{}, err
				}
			}
			ok, err := test(x)
			if err != nil {
				return Value{}, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return newGenerator("generator", out), r.charge(valueSize * len(out))
	}
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False).
func filterToJSON(r *renderer, v Value, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("tojson", args, kw, []string{"ensure_ascii", "indent", "separators", "sort_keys"}, 0)
	if err != nil {
		return Value{}, err
	}
	budget := int64(r.lim.MaxOutputBytes)
	o := &jsonOptions{budget: &budget, sortKeys: a[3].Truth()}
	if set[0] {
		o.ensureASCII = a[0].Truth()
	}
	if set[1] && a[1].kind != NoneKind {
		var ind string
		switch a[1].kind {
		case StringKind:
			ind = a[1].str
		case IntKind, BoolKind:
			if a[1].i() > 1<<16 {
				return Value{}, newErr(LimitError, "indent too large")
			}
			ind = spaces(int(a[1].i()))
		default:
			return Value{}, newErr(TypeError, "can't multiply sequence by non-int of type '%s'", a[1].typeName())
		}
		o.indent = &ind
		o.itemSep, o.keySep = ",", ": "
	} else {
		o.itemSep, o.keySep = pyfmt.ItemSep, pyfmt.KeySep
	}
	if set[2] && a[2].kind != NoneKind {
		seps, err := iterate(a[2])
		if err != nil || len(seps) != 2 {
			return Value{}, newErr(ValueError, "separators must be an (item_separator, key_separator) pair")
		}
		o.itemSep, o.keySep = softStr(seps[0]), softStr(seps[1])
	}
	var b strings.Builder
	if err := dumpJSON(&b, v, o, 0); err != nil {
		if err == errJSONBudget {
			return Value{}, newErr(LimitError, "tojson output exceeds %d bytes", r.lim.MaxOutputBytes)
		}
		return Value{}, err
	}
	return String(b.String()), r.charge(b.Len())
}
