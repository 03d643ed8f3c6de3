// Package chattemplate is a Jinja2 engine for Hugging Face chat templates.
//
// It renders the templates shipped in tokenizer_config.json (or
// chat_template.jinja) byte for byte as transformers' apply_chat_template
// does. transformers renders with Python Jinja2 set up as
//
//	ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//	    extensions=[AssistantTracker, jinja2.ext.loopcontrols])
//
// plus a tojson filter that is json.dumps(ensure_ascii=False), and the
// globals raise_exception and strftime_now. This package implements the
// part of Jinja2 that such templates use with Jinja2's semantics:
//
//   - the lexer reproduces Jinja2's regular-expression lexer, including
//     newline normalisation, the dropped trailing newline, "-" and "+"
//     whitespace control and their interaction with trim_blocks and
//     lstrip_blocks;
//   - statements: if/elif/else, for (else, loop filter, tuple unpacking,
//     the loop object), set (plain, namespace attribute, block), macro,
//     call, filter, with, print, raw, break/continue and HF's
//     {% generation %};
//   - Python values: ordered dicts ([Map]), lists, tuples, ints, floats,
//     strings as code points, None, Jinja's Undefined; Python's str(),
//     repr() and arithmetic; the string, dict and list methods templates
//     call; the immutable sandbox's attribute rules;
//   - Jinja2's built-in filters and tests that chat templates use, with
//     generator results (map, select, ...) that behave as Python's do;
//   - Jinja2's static variable scoping (symbols.go) and its constant
//     folding (optimize.go), both observable from templates.
//
// Values keep mapping insertion order: tool JSON schemas are part of the
// prompt and their key order must survive. Decode request JSON with
// [FromJSON], never through map[string]any.
//
// Rendering is bounded ([Limits]): a hostile template cannot loop, recurse
// or allocate without limit.
//
// [RenderChat] is the equivalent of transformers' apply_chat_template with
// tokenize=False, and [LoadFromModelDir] finds a model's template the way
// AutoTokenizer.from_pretrained does.
package chattemplate
