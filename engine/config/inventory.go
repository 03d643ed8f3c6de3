package config

// The weight inventory: the spec table (tensors.go) grouped by layer kind
// as the planner sums it per rank; a test checks that it adds up to
// ParamCount.

// Plan part names (PlanPart.Name).
const (
	partEmbed         = "embed_tokens"
	partLMHead        = "lm_head"
	partKDA           = "kda_attention"
	partMLA           = "dsa_attention"
	partIndexer       = "dsa_indexer"
	partDenseMLP      = "dense_mlp"
	partRouter        = "moe_router"
	partRoutedExperts = "routed_experts"
	partSharedExperts = "shared_experts"
	partMHC           = "mhc"
	partNorms         = "norms"
)

// partOrder is the order of PlanWeights.Parts.
var partOrder = []string{partEmbed, partLMHead, partKDA, partMLA, partIndexer, partDenseMLP,
	partRouter, partRoutedExperts, partSharedExperts, partMHC, partNorms}

// tensorGroup is one tensor of the table and the number of layers that
// hold one like it (1 outside the layers).
type tensorGroup struct {
	TensorSpec
	layers int64
}

// params is the group's parameter count.
func (g tensorGroup) params() int64 { return g.layers * g.Params() }

// inventory lists the model's tensors (main model and MTP layers) in the
// official (split) form, by layer kind: every routed expert's tensors
// apart, so an expert-parallel rank counts the experts it holds.
func inventory(c *ModelConfig) []tensorGroup {
	var gs []tensorGroup
	c.eachTensorKind(c.OfficialForm(), func(t TensorSpec, layers int64) {
		if layers > 0 && t.Params() > 0 {
			gs = append(gs, tensorGroup{TensorSpec: t, layers: layers})
		}
	})
	return gs
}
