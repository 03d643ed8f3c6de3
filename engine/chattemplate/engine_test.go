package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestValueSize(t *testing.T) {
	if s := int(unsafe.Sizeof(Value{})); s != valueSize && unsafe.Sizeof(uintptr(0)) == 8 {
		t.Fatalf("Value is %d bytes; update valueSize (%d)", s, valueSize)
	}
}

func mustJSON(t *testing.T, s string) Value {
	t.Helper()
	v, err := FromJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func render(t *testing.T, src string, vars Value) (string, error) {
	t.Helper()
	tpl, err := Compile(src)
	if err != nil {
		return "", err
	}
	return tpl.RenderValue(vars, nil)
}

func TestFromJSONKeepsOrderAndTypes(t *testing.T) {
	v := mustJSON(t, `{"z": 1, "a": {"y": [1, 2.0, -0, 1e2, 12345678901234567890], "b": null},
		"m": "ü\u00e9\ud83d\ude00", "t": true, "z": 3}`)
	tests := []struct {
		src, want string
	}{
		{"{{ d|tojson }}", `{"z": 3, "a": {"y": [1, 2.0, 0, 100.0, 1.2345678901234567e+19], "b": null}, "m": "üé😀", "t": true}`},
		{"{% for k in d %}{{ k }},{% endfor %}", "z,a,m,t,"},
		{"{{ d.a.y[1] is float }} {{ d.a.y[0] is integer }} {{ d.a.b is none }}", "True True True"},
		{"{{ d }}", `{'z': 3, 'a': {'y': [1, 2.0, 0, 100.0, 1.2345678901234567e+19], 'b': None}, 'm': 'üé😀', 't': True}`},
	}
	vars := NewMap()
	vars.Set("d", v)
	for _, tc := range tests {
		got, err := render(t, tc.src, MapValue(vars))
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if got != tc.want {
			t.Errorf("%s\n got %q\nwant %q", tc.src, got, tc.want)
		}
	}
}

func TestFromJSONErrors(t *testing.T) {
	for _, bad := range []string{``, `{`, `{"a":1} x`, `[1,]`, `{"a" 1}`, strings.Repeat("[", 2000) + strings.Repeat("]", 2000)} {
		if _, err := FromJSON([]byte(bad)); err == nil {
			t.Errorf("FromJSON(%.40q) succeeded", bad)
		}
	}
}

func TestValueJSON(t *testing.T) {
	m := NewMap()
	m.Set("b", Float(0.5))
	m.Set("a", List(Int(1), String("x\"\n"), None(), Bool(false)))
	got, err := MapValue(m).JSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b": 0.5, "a": [1, "x\"\n", null, false]}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if _, err := List(Undefined()).JSON(); err == nil {
		t.Fatal("Undefined serialized")
	}
}

func TestFromGo(t *testing.T) {
	v, err := FromGo(map[string]any{"b": []any{1, "x", nil, true, 2.5}, "a": map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Repr(); got != `{'a': {'k': 'v'}, 'b': [1, 'x', None, True, 2.5]}` {
		t.Fatalf("got %s", got)
	}
	if _, err := FromGo(struct{}{}); err == nil {
		t.Fatal("struct converted")
	}
}

func TestCompileErrorPositions(t *testing.T) {
	tests := []struct {
		src       string
		line, col int
		msg       string
	}{
		{"a\n{{ x|nosuch }}", 2, 6, "No filter named 'nosuch'."},
		{"{% if true %}\n\nx", 3, 2, "Unexpected end of template"},
		{"ok\n  {% frob %}", 2, 6, "Encountered unknown tag 'frob'."},
		{"{{ 'abc }}", 1, 4, "unexpected char"},
		{"{# never closed", 1, 1, "Missing end of comment tag"},
		{"x\r\n{{ (1 }}", 2, 7, "unexpected '}', expected ')'"},
		{"{% set x = %}", 1, 12, "Expected an expression"},
	}
	for _, tc := range tests {
		_, err := Compile(tc.src)
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("%q: error %v is not *Error", tc.src, err)
		}
		if e.Kind != SyntaxError || e.Line != tc.line || e.Col != tc.col || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%q: got %v (line %d col %d), want line %d col %d containing %q", tc.src, e, e.Line, e.Col, tc.line, tc.col, tc.msg)
		}
	}
}

func TestRenderErrorPositionAndRaise(t *testing.T) {
	_, err := render(t, "line1\n{% if true %}\n  {{ raise_exception('bad roles') }}\n{% endif %}", Undefined())
	msg, ok := RaisedMessage(err)
	if !ok || msg != "bad roles" {
		t.Fatalf("RaisedMessage = %q, %v (err %v)", msg, ok, err)
	}
	var e *Error
	errors.As(err, &e)
	if e.Line != 3 {
		t.Errorf("raise_exception at line %d, want 3", e.Line)
	}
	_, err = render(t, "{{ 1 }}\n{{ x.y.z }}", Undefined())
	if !errors.As(err, &e) || e.Kind != UndefinedError || e.Line != 2 || e.Message != "'x' is undefined" {
		t.Fatalf("got %v", err)
	}
	if _, ok := RaisedMessage(err); ok {
		t.Fatal("UndefinedError reported as raised")
	}
}

// TestLimits renders hostile templates; each must stop quickly with an
// error instead of hanging or exhausting memory.
func TestLimits(t *testing.T) {
	tests := []struct {
		name, src string
		kind      ErrorKind
	}{
		{"nested_loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", LimitError},
		{"recursion", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", LimitError},
		{"string_doubling", "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", LimitError},
		{"string_repeat", "{{ 'x' * 1000000000000 }}", LimitError},
		{"list_repeat", "{{ [1, 2] * 1000000000000 }}", LimitError},
		{"quadratic_list", "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}", LimitError},
		{"output", "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}", LimitError},
		{"range", "{{ range(10000000)|length }}", OverflowError},
		{"center", "{{ 'x'.center(10000000000) }}", LimitError},
		{"tojson_indent", "{{ [[[[1]]]]|tojson(indent=10000000000) }}", LimitError},
		{"join_bomb", "{% set ns = namespace(l=['x' * 100000]) %}{% for i in range(20) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|join }}", LimitError},
		{"replace_bomb", "{% set ns = namespace(s='aaaa') %}{% for i in range(40) %}{% set ns.s = ns.s|replace('a', 'aaaa') %}{% endfor %}", LimitError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Compile(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = tpl.RenderValue(Undefined(), nil)
			var e *Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Fatalf("got %v, want %v", err, tc.kind)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
	deep := strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000)
	if _, err := Compile("{{ " + deep + " }}"); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Fatalf("deep nesting: %v", err)
	}
	chain := "{{ 1" + strings.Repeat(" + 1", 5000) + " }}"
	if _, err := Compile(chain); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Fatalf("long operator chain: %v", err)
	}
	blocks := strings.Repeat("{% if true %}", 1000) + strings.Repeat("{% endif %}", 1000)
	if _, err := Compile(blocks); err == nil || !strings.Contains(err.Error(), "too deep") {
		t.Fatalf("deep blocks: %v", err)
	}
}

func TestRenderCancelled(t *testing.T) {
	tpl, err := Compile("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = tpl.RenderValue(Undefined(), &RenderOptions{Context: ctx, Limits: Limits{MaxSteps: math.MaxInt64}})
	var e *Error
	if !errors.As(err, &e) || e.Kind != LimitError || !strings.Contains(e.Message, "cancel") {
		t.Fatalf("got %v", err)
	}
}

func TestRenderMapAndGlobals(t *testing.T) {
	tpl, err := Compile("{{ a }}-{{ b }}-{{ g }}-{{ strftime_now('%Y') }}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(map[string]Value{"a": Int(1), "b": Strings("x")})
	if err != nil || got != "1-['x']--"+time.Now().Format("2006") {
		t.Fatalf("Render = %q, %v", got, err)
	}
	vars := NewMap()
	vars.Set("a", String("v"))
	got, err = tpl.RenderValue(MapValue(vars), &RenderOptions{
		Globals: map[string]Value{"g": String("G"), "a": String("shadowed")},
		Now:     FixedClock(time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)),
	})
	if err != nil || got != "v--G-1999" {
		t.Fatalf("RenderValue = %q, %v", got, err)
	}
	if _, err := tpl.RenderValue(Int(1), nil); err == nil {
		t.Fatal("non-mapping variables accepted")
	}
}

func TestRenderChatVariables(t *testing.T) {
	tpl, err := Compile("{{ messages|length }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|" +
		"{{ bos_token }}|{{ eos_token }}|{{ unk_token is defined }}|{{ additional_special_tokens }}|" +
		"{{ enable_thinking }}|{{ reasoning_effort }}|{{ tools[0].function.parameters|tojson if tools else '' }}")
	if err != nil {
		t.Fatal(err)
	}
	kw := NewMap()
	kw.Set("enable_thinking", Bool(false))
	kw.Set("reasoning_effort", String("max"))
	kw.Set("eos_token", String("<override>"))
	base := Chat{
		Messages:            mustJSON(t, `[{"role": "user", "content": "hi"}]`),
		AddGenerationPrompt: true,
		Kwargs:              kw,
		Tokens:              SpecialTokens{BOS: "<s>", EOS: "</s>", Additional: []string{"<a>"}},
	}
	got, err := RenderChat(tpl, base)
	if err != nil {
		t.Fatal(err)
	}
	if want := "1|None|None|True|<s>|<override>|False|['<a>']|False|max|"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	withTools := base
	withTools.Tools = mustJSON(t, `[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}]`)
	got, err = RenderChat(tpl, withTools)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, `|{"type": "object", "properties": {"z": {}, "a": {}}}`) {
		t.Fatalf("tool schema order lost: %q", got)
	}
	bad := NewMap()
	bad.Set("messages", List())
	if _, err := RenderChat(tpl, Chat{Messages: List(), Kwargs: bad}); err == nil {
		t.Fatal("kwarg named messages accepted")
	}
	if _, err := RenderChat(tpl, Chat{Messages: List(), AddGenerationPrompt: true, ContinueFinalMessage: true}); err == nil {
		t.Fatal("continue_final_message with add_generation_prompt accepted")
	}
	if _, err := RenderChat(nil, base); err == nil {
		t.Fatal("nil template accepted")
	}
}

func TestRenderChatContinueFinalMessage(t *testing.T) {
	tpl, err := Compile("{% for m in messages %}<{{ m.role }}>{{ m.content if m.content is string else m.content[-1].text }}</end>\n{% endfor %}")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, messages, want string
	}{
		{"string", `[{"role": "user", "content": "q"}, {"role": "assistant", "content": "The answer is"}]`, "<user>q</end>\n<assistant>The answer is"},
		{"trailing_space_trimmed", `[{"role": "assistant", "content": "x  "}]`, "<assistant>x  "},
		{"blocks", `[{"role": "assistant", "content": [{"type": "image"}, {"type": "text", "text": "partial"}]}]`, "<assistant>partial"},
	}
	for _, tc := range tests {
		got, err := RenderChat(tpl, Chat{Messages: mustJSON(t, tc.messages), ContinueFinalMessage: true})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{`[]`, `[{"role": "assistant"}]`, `[{"role": "assistant", "content": [{"type": "image"}]}]`} {
		if _, err := RenderChat(tpl, Chat{Messages: mustJSON(t, bad), ContinueFinalMessage: true}); err == nil {
			t.Errorf("%s: continued", bad)
		}
	}
	// A template that drops the final message cannot be continued.
	drop, _ := Compile("{% for m in messages[:-1] %}{{ m.content }}{% endfor %}")
	if _, err := RenderChat(drop, Chat{Messages: mustJSON(t, `[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]`), ContinueFinalMessage: true}); err == nil {
		t.Error("continued a dropped message")
	}
}

func TestConcurrentRender(t *testing.T) {
	tpl, err := Compile("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content|upper }}{% endfor %}{{ ns.n }}")
	if err != nil {
		t.Fatal(err)
	}
	msgs := mustJSON(t, `[{"content": "a"}, {"content": "b"}, {"content": "c"}]`)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				got, err := RenderChat(tpl, Chat{Messages: msgs})
				if err != nil || got != "ABC3" {
					errs <- errors.New("got " + got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func BenchmarkCompileGLM5(b *testing.B) {
	src := readTemplate(b, "glm5")
	for i := 0; i < b.N; i++ {
		if _, err := Compile(src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderGLM5Tools(b *testing.B) {
	tpl, err := Compile(readTemplate(b, "glm5"))
	if err != nil {
		b.Fatal(err)
	}
	var sc goldenScenario
	for _, s := range loadScenarios(b) {
		if s.Name == "tools" {
			sc = s
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := RenderChat(tpl, Chat{Messages: sc.Messages, Tools: sc.Tools, AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHostileCompile guards against compile-time blowups: symbol analysis
// of many ifs in a frame with many names, a template full of huge
// constants, thousands of adjacent string literals.
func TestHostileCompile(t *testing.T) {
	var names, consts strings.Builder
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&names, "{%% set v%d = %d %%}", i, i)
	}
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&names, "{%% if x %%}{%% set w%d = 1 %%}{%% endif %%}", i)
	}
	for i := 0; i < 20000; i++ {
		consts.WriteString("{{ 'a' * 1000000 }}")
	}
	for name, src := range map[string]string{
		"many_ifs":   names.String(),
		"big_consts": consts.String(),
		"literals":   "{{ " + strings.Repeat("'a' ", 200000) + "}}",
	} {
		start := time.Now()
		if _, err := Compile(src); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("%s: compile took %v", name, d)
		}
	}
}
