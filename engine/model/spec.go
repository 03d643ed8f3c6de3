package model

// SpecStats are the speculative-decoding counters with vLLM's metric
// names (glm5next-features.md §2.6): vllm:spec_decode_num_drafts,
// vllm:spec_decode_num_draft_tokens, vllm:spec_decode_num_accepted_tokens
// and vllm:spec_decode_num_accepted_tokens_per_pos{position}.
type SpecStats struct {
	Drafts, DraftTokens, Accepted int64
	PerPos                        []int64
}

// Observe records one drafted sequence's step: numDraft tokens proposed,
// accepted of them taken (positions 0..accepted-1 count one each).
func (s *SpecStats) Observe(numDraft, accepted int) {
	if numDraft == 0 {
		return
	}
	s.Drafts++
	s.DraftTokens += int64(numDraft)
	s.Accepted += int64(accepted)
	for len(s.PerPos) < numDraft {
		s.PerPos = append(s.PerPos, 0)
	}
	for i := range accepted {
		s.PerPos[i]++
	}
}

// MeanAcceptanceLength is 1 + accepted/drafts (the bonus token included).
func (s *SpecStats) MeanAcceptanceLength() float64 {
	if s.Drafts == 0 {
		return 0
	}
	return 1 + float64(s.Accepted)/float64(s.Drafts)
}
