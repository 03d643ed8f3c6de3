package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Names of the files Open looks for, in order.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Checkpoint is a set of memory-mapped safetensors files seen as one
// name → tensor map. Data slices alias the mappings: they (and device
// tensors made from them without copying) are valid until Close.
// Checkpoint is safe for concurrent reads; Close must not race with them.
type Checkpoint struct {
	path    string
	files   []*file // sorted by path
	tensors map[string]TensorInfo
	byFile  map[string]*file
	names   []string
	meta    map[string]string
	closed  bool
}

// file is one mapped safetensors file.
type file struct {
	path  string
	data  []byte // the whole file
	unmap func() error
	hdr   *Header
}

// Open opens the checkpoint in dir: dir/model.safetensors (one file), else
// dir/model.safetensors.index.json (shards listed in its weight_map), else
// every *.safetensors file in dir. dir may also name a single
// .safetensors file. Every error names the file at fault.
func Open(dir string) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	if !st.IsDir() {
		return openFiles(dir, []string{dir})
	}
	single := filepath.Join(dir, SingleFile)
	if exists(single) {
		return openFiles(single, []string{single})
	}
	index := filepath.Join(dir, IndexFile)
	if exists(index) {
		return openIndex(index)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no %s, %s or *.safetensors files", dir, SingleFile, IndexFile)
	}
	return openFiles(dir, paths)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// openFiles maps paths; a tensor name may appear in only one of them.
func openFiles(source string, paths []string) (*Checkpoint, error) {
	c := &Checkpoint{path: source, tensors: map[string]TensorInfo{}, byFile: map[string]*file{}, meta: map[string]string{}}
	slices.Sort(paths)
	for _, p := range paths {
		f, err := openFile(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.files = append(c.files, f)
		c.byFile[p] = f
		for _, t := range f.hdr.Tensors {
			if prev, dup := c.tensors[t.Name]; dup {
				c.Close()
				return nil, fmt.Errorf("%s: tensor %q is also in %s", p, t.Name, prev.File)
			}
			t.File = p
			c.tensors[t.Name] = t
		}
		for k, v := range f.hdr.Metadata {
			if _, ok := c.meta[k]; !ok {
				c.meta[k] = v
			}
		}
	}
	c.names = make([]string, 0, len(c.tensors))
	for n := range c.tensors {
		c.names = append(c.names, n)
	}
	sort.Strings(c.names)
	return c, nil
}

// openFile maps one file and parses its header.
func openFile(path string) (*file, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	hdr, err := ParseHeader(data, int64(len(data)))
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &file{path: path, data: data, unmap: unmap, hdr: hdr}, nil
}

// index is model.safetensors.index.json.
type index struct {
	WeightMap map[string]string `json:"weight_map"`
}

// openIndex opens the shards of a sharded checkpoint and checks the index
// against them both ways: every listed tensor is in its shard, every shard
// tensor is listed (for this one shard).
func openIndex(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: empty or missing weight_map", path)
	}
	dir := filepath.Dir(path)
	shardOf := map[string]string{} // shard path → one tensor naming it, for messages
	for name, shard := range idx.WeightMap {
		if !filepath.IsLocal(shard) {
			return nil, fmt.Errorf("%s: tensor %q: shard %q is not a file inside the checkpoint directory", path, name, shard)
		}
		p := filepath.Join(dir, shard)
		if _, ok := shardOf[p]; !ok || name < shardOf[p] {
			shardOf[p] = name
		}
	}
	paths := make([]string, 0, len(shardOf))
	for p, name := range shardOf {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s: shard %q (holding tensor %q): %w", path, filepath.Base(p), name, err)
		}
		paths = append(paths, p)
	}
	c, err := openFiles(path, paths)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		p := filepath.Join(dir, idx.WeightMap[name])
		if t, ok := c.tensors[name]; !ok || t.File != p {
			c.Close()
			return nil, fmt.Errorf("%s: tensor %q is mapped to %s, which does not contain it", path, name, idx.WeightMap[name])
		}
	}
	for _, name := range c.names {
		if _, ok := idx.WeightMap[name]; !ok {
			c.Close()
			return nil, fmt.Errorf("%s: %s holds tensor %q, which the index does not list", path, c.tensors[name].File, name)
		}
	}
	return c, nil
}

// Path is what Open resolved dir to: the single file, the index file or
// the directory of a set of files. Loaders use it in messages.
func (c *Checkpoint) Path() string { return c.path }

// Files lists the mapped .safetensors files, sorted.
func (c *Checkpoint) Files() []string {
	out := make([]string, len(c.files))
	for i, f := range c.files {
		out[i] = f.path
	}
	return out
}

// Names lists every tensor name, sorted.
func (c *Checkpoint) Names() []string { return slices.Clone(c.names) }

// Info describes a tensor.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	t, ok := c.tensors[name]
	if ok {
		t.Shape = slices.Clone(t.Shape)
	}
	return t, ok
}

// Data returns the tensor's little-endian bytes, aliasing the mapped file:
// read-only, valid until Close.
func (c *Checkpoint) Data(name string) ([]byte, error) {
	if c.closed {
		return nil, fmt.Errorf("%s: checkpoint is closed", c.path)
	}
	t, ok := c.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", c.path, name)
	}
	f := c.byFile[t.File]
	return f.data[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
}

// Metadata returns the files' __metadata__ entries merged (where files
// disagree the first file by name wins).
func (c *Checkpoint) Metadata() map[string]string {
	m := make(map[string]string, len(c.meta))
	for k, v := range c.meta {
		m[k] = v
	}
	return m
}

// Close unmaps the files. Data slices and aliasing tensors become invalid.
func (c *Checkpoint) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, f := range c.files {
		if err := f.unmap(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.path, err))
		}
	}
	return errors.Join(errs...)
}
