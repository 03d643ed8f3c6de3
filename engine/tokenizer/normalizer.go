package tokenizer

import "golang.org/x/text/unicode/norm"

// normalizer rewrites text before pre-tokenization. Only Unicode
// normalization forms are supported; they are exact and need no offsets.
type normalizer []norm.Form

var normalizerForms = map[string]norm.Form{
	"NFC":  norm.NFC,
	"NFD":  norm.NFD,
	"NFKC": norm.NFKC,
	"NFKD": norm.NFKD,
}

// apply runs the forms in order; a nil normalizer is the identity.
func (n normalizer) apply(s string) string {
	for _, f := range n {
		if !f.IsNormalString(s) {
			s = f.String(s)
		}
	}
	return s
}
