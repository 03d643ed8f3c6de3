package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/pyfmt"
	"github.com/npuserve/npuserve/engine/sampling"
)

// APIError is an error answered with vLLM's envelope
// {"error": {"message", "type", "param", "code"}} (vLLM ErrorResponse /
// ErrorInfo with an integer code, the form vllm-ascend's vLLM 0.2x pin
// and later releases emit).
type APIError struct {
	// Status is the HTTP status, also sent as "code".
	Status int
	// Type is ErrorInfo.type: vLLM's exception-class style name
	// ("BadRequestError", "NotFoundError", "InternalServerError") for
	// errors raised while serving, and the HTTP reason phrase ("Bad
	// Request", "Unauthorized", ...) for request-validation and HTTP-level
	// errors, as vLLM's exception handlers do.
	Type string
	// Message is ErrorInfo.message.
	Message string
	// Param is ErrorInfo.param ("" is null).
	Param string
}

// Error returns the message.
func (e *APIError) Error() string { return e.Message }

// MarshalJSON writes the envelope.
func (e *APIError) MarshalJSON() ([]byte, error) {
	var param *string
	if e.Param != "" {
		param = &e.Param
	}
	return marshal(struct {
		Error errorInfo `json:"error"`
	}{errorInfo{e.Message, e.Type, param, e.Status}})
}

type errorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// badRequest is vLLM's create_error_response default: 400
// "BadRequestError".
func badRequest(format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: fmt.Sprintf(format, args...)}
}

// badParam is a 400 naming the offending parameter (VLLMValidationError).
func badParam(param, format string, args ...any) *APIError {
	e := badRequest(format, args...)
	e.Param = param
	return e
}

// httpError is the error of vLLM's HTTPException handler: the reason
// phrase as type.
func httpError(status int, msg string) *APIError {
	return &APIError{Status: status, Type: http.StatusText(status), Message: msg}
}

// notFoundModel is vLLM's _check_model error.
func notFoundModel(model string) *APIError {
	return &APIError{Status: http.StatusNotFound, Type: "NotFoundError", Param: "model",
		Message: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// fromError maps an error from validation or the engine to the response
// vLLM's create_error_response would give.
func fromError(err error) *APIError {
	var ae *APIError
	var ve *sampling.ValidationError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ve):
		return badParam(ve.Param, "%s", ve.Error())
	case errors.Is(err, core.ErrClosed):
		return &APIError{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailableError", Message: "The server is shutting down: " + err.Error()}
	}
	return badRequest("%s", err.Error())
}

// internalError is a failure of the engine while a request ran.
func internalError(err error) *APIError {
	return &APIError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: err.Error()}
}

// pydanticError is one entry of a FastAPI RequestValidationError.
type pydanticError struct {
	Type string
	// Loc is the cleaned location, e.g. "body.temperature".
	Loc string
	Msg string
	// Input is the offending value as Python repr (already rendered).
	Input string
	// Ctx is the rendered ctx dict, "" when absent.
	Ctx string
	// Param overrides the param derived from Loc (a VLLMValidationError's
	// parameter raised inside a validator).
	Param string
}

func (e pydanticError) String() string {
	s := fmt.Sprintf("{'type': %s, 'loc': %s, 'msg': %s, 'input': %s", pyfmt.Repr(e.Type), pyfmt.Repr(e.Loc), pyfmt.Repr(e.Msg), e.Input)
	if e.Ctx != "" {
		s += ", 'ctx': " + e.Ctx
	}
	return s + "}"
}

// validationError renders errors as vLLM's RequestValidationError handler
// does: HTTP 400, type "Bad Request", the message "N validation
// error(s):\n  {...}" listing at most 10 entries, and param taken from the
// first entry (a validator's VLLMValidationError parameter, else its loc).
func validationError(errs []pydanticError) *APIError {
	const maxReported = 10
	label := "error"
	if len(errs) != 1 {
		label = "errors"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d validation %s:\n", len(errs), label)
	for i, e := range errs {
		if i == maxReported {
			fmt.Fprintf(&b, "  ...and %d more %s\n", len(errs)-maxReported, label)
			break
		}
		s := e.String()
		if len(s) > 1000 {
			s = s[:1000] + "...[truncated]"
		}
		b.WriteString("  " + s + "\n")
	}
	param := ""
	for _, e := range errs {
		if e.Param != "" {
			param = e.Param
			break
		}
	}
	if param == "" && len(errs) > 0 {
		param = errs[0].Loc
	}
	return &APIError{Status: http.StatusBadRequest, Type: "Bad Request", Message: strings.TrimRight(b.String(), " \n"), Param: param}
}

// valueError is a ValueError raised by a request model validator (mode
// "before"): pydantic reports it at loc "body" with the whole body as
// input; param names the field when the validator raised a
// VLLMValidationError with a parameter.
func valueError(param string, nFields int, cls, msg string) *APIError {
	full := msg
	if param != "" && cls == "VLLMValidationError" {
		full = msg + " (parameter=" + param + ")"
	}
	return validationError([]pydanticError{{
		Type: "value_error", Loc: "body", Msg: "Value error, " + full,
		Input: pyfmt.Repr(fmt.Sprintf("<dict of %d items>", nFields)),
		Ctx:   fmt.Sprintf("{'error': %s(%s)}", cls, pyfmt.Repr(msg)),
		Param: param,
	}})
}

// jsonDecodeError is FastAPI's error for a body that is not JSON: type
// json_invalid at ("body", pos) with Python's json error text in ctx.
func jsonDecodeError(body []byte, err error) *APIError {
	pos, reason := len(body), "Expecting value"
	var se *json.SyntaxError
	if errors.As(err, &se) {
		msg := se.Error()
		pos = int(se.Offset)
		if !strings.HasPrefix(msg, "unexpected end") && pos > 0 {
			pos-- // Go's offset is just past the offending byte
		}
		switch {
		case strings.Contains(msg, "after object key:value pair"):
			reason = "Expecting ',' delimiter"
		case strings.Contains(msg, "after array element"):
			reason = "Expecting ',' delimiter"
		case strings.Contains(msg, "after object key"):
			reason = "Expecting ':' delimiter"
		case strings.Contains(msg, "looking for beginning of object key string"):
			reason = "Expecting property name enclosed in double quotes"
		case strings.Contains(msg, "after top-level value"):
			reason = "Extra data"
		case strings.Contains(msg, "in string literal"):
			reason = "Invalid control character at"
		case strings.Contains(msg, "in string escape code"):
			reason = "Invalid \\escape"
		}
	}
	// Python's json counts characters, Go bytes.
	pos = len([]rune(string(body[:min(pos, len(body))])))
	return validationError([]pydanticError{{
		Type: "json_invalid", Loc: "body." + strconv.Itoa(pos), Msg: "JSON decode error",
		Input: pyfmt.Repr("<dict of 0 items>"), Ctx: fmt.Sprintf("{'error': %s}", pyfmt.Repr(reason)),
	}})
}

// pyInput renders a JSON value as vLLM's validation handler shows an
// error's input: strings (cut at 200 characters) and scalars as Python
// reprs, containers as "<list of N items>" / "<dict of N items>" (counted
// without decoding them: the value may be most of a large body).
func pyInput(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && (t[0] == '[' || t[0] == '{') && json.Valid(t) {
		kind := "list"
		if t[0] == '{' {
			kind = "dict"
		}
		return pyfmt.Repr(fmt.Sprintf("<%s of %d items>", kind, countElems(t)))
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(t))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return pyfmt.Repr(string(raw))
	}
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case json.Number:
		s := x.String()
		if strings.ContainsAny(s, ".eE") {
			f, err := x.Float64()
			if err == nil {
				return pyfmt.FloatRepr(f)
			}
		}
		return s
	case string:
		r := []rune(x)
		if len(r) > 200 {
			return pyfmt.Repr(string(r[:200]) + "...[truncated]")
		}
		return pyfmt.Repr(x)
	}
	return pyfmt.Repr(string(raw))
}

// countElems counts the elements of a valid JSON array, or the members of
// a valid JSON object, without decoding them.
func countElems(t []byte) int {
	depth, n := 0, 0
	inStr, esc, empty := false, false, true
	for _, c := range t {
		switch {
		case esc:
			esc = false
		case inStr:
			if c == '\\' {
				esc = true
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
			empty = false
		case c == '[' || c == '{':
			if depth > 0 {
				empty = false
			}
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
		case c != ' ' && c != '\t' && c != '\n' && c != '\r':
			empty = false
		}
	}
	if empty {
		return 0
	}
	return n + 1
}
