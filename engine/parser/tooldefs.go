package parser

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Tool is one function tool from a chat request.
type Tool struct {
	// Name is function.name.
	Name string
	// Parameters is function.parameters verbatim (a JSON schema; may be
	// empty). Only the top-level "properties" → "type" entries are used.
	Parameters json.RawMessage
}

// ParseTools decodes the "tools" array of an OpenAI chat request:
// [{"type": "function", "function": {"name", "description", "parameters"}}].
// A null or absent value gives no tools.
func ParseTools(raw json.RawMessage) ([]Tool, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var items []struct {
		Type     string `json:"type"`
		Function *struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("parser: tools: %w", err)
	}
	tools := make([]Tool, 0, len(items))
	for i, it := range items {
		if it.Type != "" && it.Type != "function" {
			return nil, fmt.Errorf("parser: tools[%d]: unsupported type %q", i, it.Type)
		}
		if it.Function == nil || it.Function.Name == "" {
			return nil, fmt.Errorf("parser: tools[%d]: function.name is required", i)
		}
		tools = append(tools, Tool{Name: it.Function.Name, Parameters: it.Function.Parameters})
	}
	return tools, nil
}

// ToolChoiceMode is the kind of tool_choice in a request.
type ToolChoiceMode string

// The tool_choice modes of the OpenAI API.
const (
	ToolChoiceNone     ToolChoiceMode = "none"
	ToolChoiceAuto     ToolChoiceMode = "auto"
	ToolChoiceRequired ToolChoiceMode = "required"
	ToolChoiceFunction ToolChoiceMode = "function" // {"type":"function","function":{"name":…}}
)

// ToolChoice is a request's tool_choice.
type ToolChoice struct {
	Mode ToolChoiceMode
	// Name is the forced function for ToolChoiceFunction.
	Name string
}

// ParseToolChoice decodes tool_choice. As in vLLM's ChatCompletionRequest,
// an absent (or null) value means "auto" when the request has tools and
// "none" otherwise.
func ParseToolChoice(raw json.RawMessage, hasTools bool) (ToolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		if hasTools {
			return ToolChoice{Mode: ToolChoiceAuto}, nil
		}
		return ToolChoice{Mode: ToolChoiceNone}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch m := ToolChoiceMode(s); m {
		case ToolChoiceNone, ToolChoiceAuto, ToolChoiceRequired:
			return ToolChoice{Mode: m}, nil
		}
		return ToolChoice{}, fmt.Errorf("parser: tool_choice: unknown value %q", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return ToolChoice{}, fmt.Errorf("parser: tool_choice: %w", err)
	}
	if named.Type != "function" || named.Function.Name == "" {
		return ToolChoice{}, errors.New(`parser: tool_choice: want "none", "auto", "required" or {"type": "function", "function": {"name": …}}`)
	}
	return ToolChoice{Mode: ToolChoiceFunction, Name: named.Function.Name}, nil
}

// argKind says how an argument value is typed, from its schema.
type argKind uint8

const (
	// argAny: no usable schema. vLLM's glm4_moe parser decodes the text
	// with json.loads, then ast.literal_eval, and otherwise keeps the
	// (stripped) text as a string.
	argAny argKind = iota
	// argTyped: a declared type other than "string" (integer, number,
	// boolean, object, array, a union, …): decoded like argAny.
	argTyped
	// argString: "type": "string". The raw text is the value, whitespace
	// included, and it can be streamed before </arg_value> arrives.
	argString
	// argNullableString: "type": ["string", "null"] (any order). The text
	// "null" is null, anything else the raw text.
	argNullableString
)

// toolSchemas maps tool name → argument name → kind.
type toolSchemas map[string]map[string]argKind

func buildSchemas(tools []Tool) toolSchemas {
	m := make(toolSchemas, len(tools))
	for _, t := range tools {
		if _, dup := m[t.Name]; dup {
			continue // vLLM uses the first tool with a matching name
		}
		props := map[string]argKind{}
		m[t.Name] = props
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if len(t.Parameters) == 0 || json.Unmarshal(t.Parameters, &schema) != nil {
			continue
		}
		for name, raw := range schema.Properties {
			var p struct {
				Type json.RawMessage `json:"type"`
			}
			if json.Unmarshal(raw, &p) != nil {
				continue
			}
			var one string
			var many []string
			switch {
			case len(p.Type) == 0:
				props[name] = argAny
			case json.Unmarshal(p.Type, &one) == nil:
				if one == "string" {
					props[name] = argString
				} else {
					props[name] = argTyped
				}
			case json.Unmarshal(p.Type, &many) == nil:
				str, null, other := false, false, false
				for _, t := range many {
					switch t {
					case "string":
						str = true
					case "null":
						null = true
					default:
						other = true
					}
				}
				switch {
				case str && !null && !other:
					props[name] = argString
				case str && null && !other:
					props[name] = argNullableString
				default:
					props[name] = argTyped
				}
			}
		}
	}
	return m
}

// kind returns the typing rule for argument arg of tool.
func (s toolSchemas) kind(tool, arg string) argKind {
	return s[tool][arg]
}

// typedValue converts the text of one <arg_value> into a JSON value as
// vLLM's glm4_moe/glm47 tool parser does (_is_string_type, _deserialize).
func typedValue(raw string, k argKind) value {
	switch k {
	case argString:
		return value{kind: kindString, s: raw}
	case argNullableString:
		if pyStrip(raw) == "null" {
			return value{kind: kindNull}
		}
		return value{kind: kindString, s: raw}
	}
	return deserialize(pyStrip(raw))
}

// deserialize is json.loads, else ast.literal_eval, else the text itself.
func deserialize(text string) value {
	if v, ok := parseJSON(text); ok {
		return v
	}
	if v, ok := parsePyLiteral(text); ok {
		return v
	}
	return value{kind: kindString, s: text}
}

// NewToolCallID returns an id the way vLLM's make_tool_call_id does by
// default: "chatcmpl-tool-" followed by the 32 hex digits of a random
// (version 4) UUID.
func NewToolCallID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("parser: crypto/rand: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return "chatcmpl-tool-" + hex.EncodeToString(b[:])
}

// SequentialIDs returns an id generator for tests and reproducible
// output: prefix0, prefix1, …
func SequentialIDs(prefix string) func() string {
	n := 0
	return func() string {
		id := fmt.Sprintf("%s%d", prefix, n)
		n++
		return id
	}
}
