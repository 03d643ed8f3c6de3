package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The goldens are produced by tools/golden/chat_templates.py with
// transformers' renderer (or Jinja2 set up exactly as transformers sets it
// up); see tools/golden/README.md.

// testdataDir is where the goldens live; CHATTEMPLATE_TESTDATA points the
// tests at goldens generated elsewhere (chat_templates.py --testdata).
func testdataDir() string {
	if d := os.Getenv("CHATTEMPLATE_TESTDATA"); d != "" {
		return d
	}
	return "testdata"
}

// goldenNow is FIXED_NOW of chat_templates.py.
var goldenNow = time.Date(2026, 1, 2, 15, 4, 5, 123456000, time.Local)

type goldenError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// pythonKinds maps Python exception classes to the kinds we report.
var pythonKinds = map[string]ErrorKind{
	"TemplateSyntaxError":    SyntaxError,
	"TemplateAssertionError": SyntaxError,
	"UndefinedError":         UndefinedError,
	"TypeError":              TypeError,
	"ValueError":             ValueError,
	"ZeroDivisionError":      ValueError,
	"TemplateError":          TemplateError,
	"SecurityError":          SecurityError,
	"OverflowError":          OverflowError,
	"TemplateRuntimeError":   RuntimeError,
	"FilterArgumentError":    RuntimeError,
	"AttributeError":         AttributeError,
	"KeyError":               ValueError,
	"RecursionError":         LimitError,
}

// checkError verifies that err matches the error Python raised: same
// kind, and for raise_exception and undefined values the same message.
func checkError(t *testing.T, err error, want goldenError) {
	t.Helper()
	if err == nil {
		t.Fatalf("rendered without error; Python raised %s: %s", want.Type, want.Message)
	}
	var e *Error
	if !errors.As(err, &e) {
		if want.Type == "ValueError" {
			return // RenderChat's own argument checks
		}
		t.Fatalf("error %v is not an *Error; Python raised %s: %s", err, want.Type, want.Message)
	}
	kind, ok := pythonKinds[want.Type]
	if !ok {
		t.Fatalf("unmapped Python exception %s (%s); we said %v", want.Type, want.Message, err)
	}
	if e.Kind != kind {
		t.Fatalf("error kind %v (%v), Python raised %s: %s", e.Kind, err, want.Type, want.Message)
	}
	if (kind == TemplateError || kind == UndefinedError) && e.Message != want.Message {
		t.Fatalf("error message %q, Python said %q", e.Message, want.Message)
	}
}

// readTemplate returns a committed template by name.
func readTemplate(t testing.TB, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

type goldenScenario struct {
	Name                 string
	Messages             Value
	Tools                Value
	Documents            Value
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	Kwargs               *Map
}

func loadScenarios(t testing.TB) []goldenScenario {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdataDir(), "golden/scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var out []goldenScenario
	for _, s := range root.Get("scenarios").Items() {
		name, _ := s.Get("name").AsString()
		agp, _ := s.Get("add_generation_prompt").AsBool()
		cfm, _ := s.Get("continue_final_message").AsBool()
		out = append(out, goldenScenario{
			Name:                 name,
			Messages:             s.Get("messages"),
			Tools:                s.Get("tools"),
			Documents:            s.Get("documents"),
			AddGenerationPrompt:  agp,
			ContinueFinalMessage: cfm,
			Kwargs:               s.Get("kwargs").AsMap(),
		})
	}
	if len(out) == 0 {
		t.Fatal("no scenarios")
	}
	return out
}

type manifestEntry struct {
	File          string                     `json:"file"`
	Origin        string                     `json:"origin"`
	SpecialTokens map[string]json.RawMessage `json:"special_tokens"`
}

func loadManifest(t testing.TB) map[string]manifestEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdataDir(), "templates/manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Templates map[string]manifestEntry `json:"templates"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Templates) == 0 {
		t.Fatal("empty manifest")
	}
	return m.Templates
}

func TestGoldenChatTemplates(t *testing.T) {
	scenarios := loadScenarios(t)
	for name, info := range loadManifest(t) {
		src, err := os.ReadFile(filepath.Join(testdataDir(), "templates", info.File))
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := Compile(string(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tokens, err := parseSpecialTokens(info.SpecialTokens)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, sc := range scenarios {
			t.Run(name+"/"+sc.Name, func(t *testing.T) {
				base := filepath.Join(testdataDir(), "golden", name, sc.Name)
				got, err := RenderChat(tpl, Chat{
					Messages:             sc.Messages,
					Tools:                sc.Tools,
					Documents:            sc.Documents,
					AddGenerationPrompt:  sc.AddGenerationPrompt,
					ContinueFinalMessage: sc.ContinueFinalMessage,
					Kwargs:               sc.Kwargs,
					Tokens:               tokens,
					Options:              &RenderOptions{Now: FixedClock(goldenNow)},
				})
				if errData, rerr := os.ReadFile(base + ".error.json"); rerr == nil {
					var want goldenError
					if err := json.Unmarshal(errData, &want); err != nil {
						t.Fatal(err)
					}
					checkError(t, err, want)
					return
				}
				want, rerr := os.ReadFile(base + ".txt")
				if rerr != nil {
					t.Fatalf("missing golden: %v", rerr)
				}
				if err != nil {
					t.Fatalf("render: %v", err)
				}
				if got != string(want) {
					t.Fatalf("mismatch\n got: %q\nwant: %q\n%s", got, want, firstDiff(got, string(want)))
				}
			})
		}
	}
}

// firstDiff describes where two strings start to differ.
func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := i - 40
	if lo < 0 {
		lo = 0
	}
	clip := func(s string) string {
		hi := i + 40
		if hi > len(s) {
			hi = len(s)
		}
		if lo > len(s) {
			return ""
		}
		return s[lo:hi]
	}
	return "first difference at byte " + itoa(i) + ":\n got …" + quote(clip(a)) + "\nwant …" + quote(clip(b))
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

type semanticsCase struct {
	Name  string          `json:"name"`
	Src   string          `json:"src"`
	Vars  json.RawMessage `json:"vars"`
	Want  *string         `json:"want"`
	Error *goldenError    `json:"error"`
}

// TestSemanticsCases runs the engine-semantics table (whitespace control
// matrix, expressions, statements, filters, tests, methods, undefined and
// errors) whose expected results come from the reference renderer.
func TestSemanticsCases(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testdataDir(), "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []semanticsCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 100 {
		t.Fatalf("only %d cases", len(file.Cases))
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			vars, err := FromJSON(c.Vars)
			if err != nil {
				t.Fatal(err)
			}
			tpl, err := Compile(c.Src)
			var got string
			if err == nil {
				got, err = tpl.RenderValue(vars, &RenderOptions{Now: FixedClock(goldenNow)})
			}
			if c.Error != nil {
				checkError(t, err, *c.Error)
				return
			}
			if err != nil {
				t.Fatalf("src %q: %v", c.Src, err)
			}
			if got != *c.Want {
				t.Fatalf("src %q\n got: %q\nwant: %q", c.Src, got, *c.Want)
			}
		})
	}
}
