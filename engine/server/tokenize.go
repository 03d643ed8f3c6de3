package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// tokenizeResponse is vLLM's TokenizeResponse.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []int32  `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// tokenize is POST /tokenize: a completions-style {"prompt"} or a
// chat-style {"messages"} body (vLLM TokenizeCompletionRequest /
// TokenizeChatRequest); chat bodies go through the chat template exactly
// as /v1/chat/completions does.
func (s *Server) tokenize(c *gin.Context) {
	b, aerr := s.decodeTokenizerRequest(c)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	var ids []int32
	model := b.optString("model")
	returnStrs := b.bool("return_token_strs", false)
	if b.present("messages") {
		req, aerr := decodeChat(b)
		if aerr != nil {
			s.writeError(c, aerr)
			return
		}
		if aerr := s.checkModel(model); aerr != nil {
			s.writeError(c, aerr)
			return
		}
		rc, aerr := s.render.RenderChat(c.Request.Context(), req.chatInput())
		if aerr != nil {
			s.writeError(c, aerr)
			return
		}
		ids = rc.TokenIDs
	} else {
		prompt := b.optString("prompt")
		addSpecial := b.bool("add_special_tokens", true)
		if len(b.errs) > 0 {
			s.writeError(c, validationError(b.errs))
			return
		}
		if prompt == nil {
			s.writeError(c, validationError([]pydanticError{b.missing("prompt")}))
			return
		}
		if aerr := s.checkModel(model); aerr != nil {
			s.writeError(c, aerr)
			return
		}
		if aerr := s.promptLimit.check(*prompt); aerr != nil {
			s.writeError(c, aerr)
			return
		}
		for _, id := range s.tok.Encode(*prompt, addSpecial) {
			ids = append(ids, int32(id))
		}
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: s.maxModelLen, Tokens: nonNil(ids)}
	if returnStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i], _ = s.tok.IDToken(int(id))
		}
	}
	s.writeJSON(c, http.StatusOK, resp)
}

// detokenize is POST /detokenize ({"model", "tokens"} → {"prompt"}).
func (s *Server) detokenize(c *gin.Context) {
	b, aerr := s.decodeTokenizerRequest(c)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	model := b.optString("model")
	if !b.present("tokens") {
		b.errs = append(b.errs, b.missing("tokens"))
	}
	toks := b.intList("tokens")
	if len(b.errs) > 0 {
		s.writeError(c, validationError(b.errs))
		return
	}
	if aerr := s.checkModel(model); aerr != nil {
		s.writeError(c, aerr)
		return
	}
	ids := make([]int, len(toks))
	for i, t := range toks {
		if t < 0 || int(t) >= s.vocab() {
			s.writeError(c, badRequest("Token id %d is out of vocabulary", t))
			return
		}
		ids[i] = int(t)
	}
	s.writeJSON(c, http.StatusOK, map[string]string{"prompt": s.tok.Decode(ids, false)})
}

// decodeTokenizerRequest reads a /tokenize or /detokenize body; both need
// the tokenizer.
func (s *Server) decodeTokenizerRequest(c *gin.Context) (*body, *APIError) {
	b, aerr := s.decodeRequest(c)
	if aerr != nil {
		return nil, aerr
	}
	if s.tok == nil {
		return nil, skipTokenizerError()
	}
	return b, nil
}
