package tokenizer

// postProcessor adds special tokens around an encoding when Encode is
// called with addSpecial. A nil postProcessor adds nothing (HF's ByteLevel
// post-processor only adjusts offsets, which this package does not track).
type postProcessor []template

// template is a TemplateProcessing "single" template: each piece is either
// the encoded sequence (seq) or a special token's ids.
type template []templatePiece

type templatePiece struct {
	seq bool
	ids []int
}

// apply runs the templates in order; each wraps the previous result.
func (p postProcessor) apply(ids []int) []int {
	for _, tmpl := range p {
		out := make([]int, 0, len(ids)+4)
		for _, piece := range tmpl {
			if piece.seq {
				out = append(out, ids...)
			} else {
				out = append(out, piece.ids...)
			}
		}
		ids = out
	}
	return ids
}
