package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/npuserve/npuserve/engine/tokenizer"
)

func Example() {
	tok, err := tokenizer.Load("testdata/glm_mini")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("<|user|>你好, world", true)
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids, false))
	fmt.Printf("%q\n", tok.Decode(ids, true))

	// Stream decodes generated ids one at a time; 你 is three byte tokens
	// in this small vocabulary, so it appears only once complete.
	s := tok.NewStream(true)
	for _, id := range ids {
		if text := s.Add(id); text != "" {
			fmt.Printf("%q ", text)
		}
	}
	fmt.Printf("%q\n", s.Flush())
	// Output:
	// [2 4 7 174 135 268 175 112 135 25 303 283 89 81]
	// "[gMASK]<sop><|user|>你好, world"
	// "你好, world"
	// "你" "好" "," " w" "or" "l" "d" ""
}
