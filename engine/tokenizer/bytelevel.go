package tokenizer

import "unicode/utf8"

// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for
// themselves; the other 68 bytes map to U+0100 upwards, in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode maps a byte-level token (e.g. "Ġworld") back to the bytes
// it stands for. ok is false when the token contains a character outside
// the byte-level alphabet; HF's decoder then keeps the token's own UTF-8.
func byteLevelDecode(tok string) (b []byte, ok bool) {
	b = make([]byte, 0, len(tok))
	for _, r := range tok {
		c, in := runeToByte[r]
		if !in {
			return nil, false
		}
		b = append(b, c)
	}
	return b, true
}

// byteLevelEncode maps raw bytes to their byte-level characters.
func byteLevelEncode(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = utf8.AppendRune(out, byteToRune[c])
	}
	return string(out)
}
