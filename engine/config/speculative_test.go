package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseSpeculative(t *testing.T) {
	cases := []struct {
		raw  string
		want *Speculative
		err  string
	}{
		{"", nil, ""},
		{`{"method":"deepseek_mtp","num_speculative_tokens":3,"enforce_eager":true}`, &Speculative{Method: "deepseek_mtp", NumSpeculativeTokens: 3, EnforceEager: true}, ""},
		{`{"method":"mtp","num_speculative_tokens":1}`, &Speculative{Method: "mtp", NumSpeculativeTokens: 1}, ""},
		{`{"method":"eagle3","num_speculative_tokens":1}`, nil, `--speculative-config: method: "eagle3" is not supported`},
		{`{"method":"mtp","num_speculative_tokens":9}`, nil, "--speculative-config: num_speculative_tokens: must be in [1, 5], got 9"},
	}
	for _, c := range cases {
		got, err := ParseSpeculative(json.RawMessage(c.raw))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.raw, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.raw, got, err, c.want)
		}
	}
}
