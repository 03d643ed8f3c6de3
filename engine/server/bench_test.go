package server

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/npuserve/npuserve/engine/core"
)

// BenchmarkStreamingOverhead measures the server's own cost per streamed
// token (detokenization, stop checks, JSON, SSE, HTTP) against an engine
// that produces tokens instantly: 16 concurrent completions streams of
// 128 tokens per iteration.
func BenchmarkStreamingOverhead(b *testing.B) {
	ids := make([]int32, 128)
	for i := range ids {
		ids[i] = int32(100 + i%200)
	}
	eng := newFakeEngine(func(*core.Request) []int32 { return ids })
	eng.delay = 0
	ts, _ := startServer(b, eng, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	body := `{"prompt":"hello","max_tokens":128,"stream":true,"stop":["zzz"]}`
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for k := 0; k < 16; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(b.N*16*128)/b.Elapsed().Seconds(), "tokens/s")
}
