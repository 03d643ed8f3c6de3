// Package kvcache manages cache capacity for the hybrid glm5_next model:
// paged per-token storage (MLA latents and raw indexer keys of the DSA
// layers, and the pooled indexer keys derived from them) and fixed-size
// per-sequence state slots (KDA conv and recurrent state).
//
// The manager only does bookkeeping on the host: which block and which
// state slot belongs to which sequence. The device tensors themselves are
// owned by the model (glm5next.Cache) and addressed through the slots this
// package hands out in an npu.BatchLayout (block tables, never per-token
// slot lists: what crosses to the device each step grows with the batch and
// its blocks, not with the context).
//
// Addressing:
//   - token position p of a sequence lives in token slot
//     block*BlockSize + p%BlockSize, block = the sequence's
//     (p/BlockSize)-th block;
//   - complete pool i (positions i*KPool .. i*KPool+KPool-1) lives in pool
//     slot block*(BlockSize/KPool) + (i*KPool%BlockSize)/KPool, so pooled
//     storage has NumBlocks*BlockSize/KPool rows and a pool never straddles
//     blocks (BlockSize is a multiple of KPool);
//   - the sequence's fixed state lives in one state slot.
//
// Room for later features: prefix caching will share full blocks between
// sequences (blocks get reference counts and content hashes) and needs KDA
// state snapshots at block boundaries, which are just more state slots taken
// from the same allocator; MTP verification needs per-draft-position state
// copies (again extra state slots) and rolling a sequence back to its last
// accepted token, which only shortens the sequence's length here.
package kvcache

import (
	"errors"
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// ErrNoBlocks is returned when the cache has too few free blocks for a
// request; a scheduler reacts by preempting a sequence.
var ErrNoBlocks = errors.New("kvcache: out of cache blocks")

// ErrNoStateSlots is returned when every state slot is taken.
var ErrNoStateSlots = errors.New("kvcache: out of state slots")

// Config sizes a cache.
type Config struct {
	BlockSize     int // tokens per block; a positive multiple of KPool
	NumBlocks     int // blocks of per-token storage
	NumStateSlots int // per-sequence state slots (max concurrent sequences)
	KPool         int // tokens per pooled indexer key (index_kpool); 1 if unused
}

// Manager hands out blocks and state slots. It is not safe for concurrent
// use: one engine loop owns it.
type Manager struct {
	cfg        Config
	freeBlocks []int32 // stack; the next block handed out is the last
	freeSlots  []int   // stack of state slots
	live       map[*Seq]struct{}
}

// New returns a manager with every block and slot free.
func New(cfg Config) (*Manager, error) {
	if cfg.KPool < 1 {
		cfg.KPool = 1
	}
	if cfg.BlockSize < 1 || cfg.BlockSize%cfg.KPool != 0 {
		return nil, fmt.Errorf("kvcache: block size %d must be a positive multiple of index_kpool %d", cfg.BlockSize, cfg.KPool)
	}
	if cfg.NumBlocks < 0 || cfg.NumStateSlots < 1 {
		return nil, fmt.Errorf("kvcache: need blocks >= 0 and state slots >= 1, got %d and %d", cfg.NumBlocks, cfg.NumStateSlots)
	}
	if int64(cfg.NumBlocks)*int64(cfg.BlockSize) > 1<<31-1 {
		return nil, fmt.Errorf("kvcache: %d blocks of %d tokens overflow int32 token slots", cfg.NumBlocks, cfg.BlockSize)
	}
	m := &Manager{cfg: cfg, live: map[*Seq]struct{}{}}
	m.freeBlocks = make([]int32, cfg.NumBlocks)
	for i := range m.freeBlocks {
		m.freeBlocks[i] = int32(cfg.NumBlocks - 1 - i) // block 0 is handed out first
	}
	m.freeSlots = make([]int, cfg.NumStateSlots)
	for i := range m.freeSlots {
		m.freeSlots[i] = cfg.NumStateSlots - 1 - i
	}
	return m, nil
}

// Config returns the manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

// TokenSlots is the number of rows of per-token cache tensors.
func (m *Manager) TokenSlots() int { return m.cfg.NumBlocks * m.cfg.BlockSize }

// PoolSlots is the number of rows of the pooled-key cache tensors.
func (m *Manager) PoolSlots() int { return m.cfg.NumBlocks * m.cfg.BlockSize / m.cfg.KPool }

// UsedBlocks is the number of blocks held by live sequences.
func (m *Manager) UsedBlocks() int { return m.cfg.NumBlocks - len(m.freeBlocks) }

// FreeBlocks is the number of blocks available.
func (m *Manager) FreeBlocks() int { return len(m.freeBlocks) }

// UsedStateSlots is the number of state slots held by live sequences.
func (m *Manager) UsedStateSlots() int { return m.cfg.NumStateSlots - len(m.freeSlots) }

// FreeStateSlots is the number of state slots available.
func (m *Manager) FreeStateSlots() int { return len(m.freeSlots) }

// NumSeqs is the number of live sequences.
func (m *Manager) NumSeqs() int { return len(m.live) }

// Seq is one sequence's share of the cache.
type Seq struct {
	m         *Manager
	blocks    []int32
	stateSlot int
	length    int // positions with allocated slots
}

// Allocate starts a sequence: it takes a state slot (no blocks yet).
func (m *Manager) Allocate() (*Seq, error) {
	if len(m.freeSlots) == 0 {
		return nil, ErrNoStateSlots
	}
	slot := m.freeSlots[len(m.freeSlots)-1]
	m.freeSlots = m.freeSlots[:len(m.freeSlots)-1]
	s := &Seq{m: m, stateSlot: slot}
	m.live[s] = struct{}{}
	return s, nil
}

// Len is the number of positions of the sequence that have cache slots
// (tokens already computed plus those of the batch being built).
func (s *Seq) Len() int { return s.length }

// StateSlot is the sequence's fixed-state slot.
func (s *Seq) StateSlot() int { return s.stateSlot }

// Blocks is the sequence's block table (do not modify).
func (s *Seq) Blocks() []int32 { return s.blocks }

// TokenSlot is the per-token cache row of position p < Len.
func (s *Seq) TokenSlot(p int) int32 {
	bs := s.m.cfg.BlockSize
	return s.blocks[p/bs]*int32(bs) + int32(p%bs)
}

// PoolSlot is the pooled-key cache row of complete pool i.
func (s *Seq) PoolSlot(i int) int32 {
	return npu.PoolRow(s.blocks, i, s.m.cfg.KPool, s.m.cfg.BlockSize)
}

// BlocksNeeded is the number of new blocks Append(s, n) would take.
func (m *Manager) BlocksNeeded(s *Seq, n int) int {
	need := (s.length + n + m.cfg.BlockSize - 1) / m.cfg.BlockSize
	return max(need-len(s.blocks), 0)
}

// CanAppend reports whether Append(s, n) would succeed now.
func (m *Manager) CanAppend(s *Seq, n int) bool { return m.BlocksNeeded(s, n) <= len(m.freeBlocks) }

// Append gives n more positions of s cache slots, taking blocks as needed.
// It takes nothing and returns ErrNoBlocks when the free blocks do not
// suffice, so the caller can preempt and retry.
func (m *Manager) Append(s *Seq, n int) error {
	if s.m != m {
		panic("kvcache: sequence of another manager")
	}
	if _, ok := m.live[s]; !ok {
		panic("kvcache: Append on a freed sequence")
	}
	if n < 0 {
		panic(fmt.Sprintf("kvcache: Append %d positions", n))
	}
	need := m.BlocksNeeded(s, n)
	if need > len(m.freeBlocks) {
		return fmt.Errorf("%w: need %d, %d free", ErrNoBlocks, need, len(m.freeBlocks))
	}
	for range need {
		b := m.freeBlocks[len(m.freeBlocks)-1]
		m.freeBlocks = m.freeBlocks[:len(m.freeBlocks)-1]
		s.blocks = append(s.blocks, b)
	}
	s.length += n
	return nil
}

// Reserve makes sure s has blocks for n positions past its length
// without counting them in its length (speculative decoding's lookahead:
// the drafter writes there before the next step schedules them). Like
// Append it takes nothing and returns ErrNoBlocks when the free blocks do
// not suffice.
func (m *Manager) Reserve(s *Seq, n int) error {
	if err := m.Append(s, n); err != nil {
		return err
	}
	s.length -= n
	return nil
}

// Truncate shortens s to n positions (rejected speculative positions);
// its blocks stay allocated for the next positions.
func (m *Manager) Truncate(s *Seq, n int) {
	if n < 0 || n > s.length {
		panic(fmt.Sprintf("kvcache: Truncate a sequence of length %d to %d", s.length, n))
	}
	s.length = n
}

// Free returns the sequence's blocks and state slot. The sequence must not
// be used afterwards.
func (m *Manager) Free(s *Seq) {
	if _, ok := m.live[s]; !ok {
		panic("kvcache: Free of a sequence that is not live")
	}
	delete(m.live, s)
	for i := len(s.blocks) - 1; i >= 0; i-- {
		m.freeBlocks = append(m.freeBlocks, s.blocks[i])
	}
	m.freeSlots = append(m.freeSlots, s.stateSlot)
	s.blocks, s.length = nil, 0
}

// Layout describes a batch for the model: sequence b contributes its last
// rows[b] positions (appended for this batch, so rows[b] <= seqs[b].Len()).
// The block tables alias the sequences'; the layout stays valid until the
// sequences are appended to or freed.
func (m *Manager) Layout(seqs []*Seq, rows []int) npu.BatchLayout {
	if len(seqs) != len(rows) {
		panic(fmt.Sprintf("kvcache: Layout of %d sequences with %d row counts", len(seqs), len(rows)))
	}
	l := npu.BatchLayout{
		QueryStart:  make([]int, len(seqs)+1),
		Pos:         make([]int, len(seqs)),
		StateSlot:   make([]int, len(seqs)),
		BlockSize:   m.cfg.BlockSize,
		BlockTables: make([][]int32, len(seqs)),
	}
	for b, s := range seqs {
		if s.m != m {
			panic("kvcache: sequence of another manager")
		}
		if rows[b] < 0 || rows[b] > s.length {
			panic(fmt.Sprintf("kvcache: %d rows of a sequence of length %d", rows[b], s.length))
		}
		l.QueryStart[b+1] = l.QueryStart[b] + rows[b]
		l.Pos[b] = s.length - rows[b]
		l.StateSlot[b] = s.stateSlot
		l.BlockTables[b] = s.blocks[:len(s.blocks):len(s.blocks)]
	}
	return l
}
