package config

import (
	"fmt"
	"time"

	"github.com/BurntSushi/toml"
)

// parseTOML decodes a TOML settings file into nested maps with
// github.com/BurntSushi/toml. Values are normalised to the JSON-like types
// the settings code handles: string, int64, float64, bool, []any and
// map[string]any. Dates and times have no meaning in a settings file and are
// rejected with an error naming the key.
func parseTOML(src string) (map[string]any, error) {
	var raw map[string]any
	_, err := toml.Decode(src, &raw)
	if err != nil {
		return nil, err // BurntSushi errors read "toml: line N (last key …): …"
	}
	out, err := normTOML("", raw)
	if err != nil {
		return nil, err
	}
	return out.(map[string]any), nil
}

func normTOML(key string, v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			name := k
			if key != "" {
				name = key + "." + k
			}
			n, err := normTOML(name, e)
			if err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, nil
	case []map[string]any:
		return nil, fmt.Errorf("toml: %s: arrays of tables are not supported in a settings file", key)
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			n, err := normTOML(key, e)
			if err != nil {
				return nil, err
			}
			l[i] = n
		}
		return l, nil
	case time.Time:
		return nil, fmt.Errorf("toml: %s: dates and times are not supported in a settings file", key)
	case string, int64, float64, bool:
		return x, nil
	}
	return nil, fmt.Errorf("toml: %s: unsupported value %T", key, v)
}
