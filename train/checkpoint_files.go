package train

// Checkpoint files and how a save commits (checkpoint.go has the formats).
//
// A checkpoint is the model file at <path> plus the files it names: the
// optimizer state <path>.<id>.train (full checkpoints) or the shard files
// <path>.<id>.rank<r>-of-<N>.safetensors (sharded ones), id being the
// save's id ("<step>-<16 hex digits>", metadata file_id). A save writes
// the new data files under their new names first, then the model file
// atomically over <path> (checkpoint.Write: a temporary file renamed into
// place): that rename is the commit. Until it happens <path> still names
// the previous save's files, which are untouched; after it they are
// removed. So a crash or Ctrl-C at any moment of a save leaves a
// resumable checkpoint (the previous or the new one), never a mix; what a
// crash leaves behind (temporary files, data files of a save that never
// committed) is removed by the next save.
//
// Checkpoints saved before file ids (<path>.train, <path>.rank<r>-of-<N>
// .safetensors, no file_id in the metadata) still load, and the first new
// save at that path removes their files.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
)

// fileIDKey is the model file's metadata key naming its save's data files.
const fileIDKey = "file_id"

// newSaveID is a fresh save id for a save at step.
func newSaveID(step int64) string {
	return fmt.Sprintf("%d-%016x", step, rand.Uint64())
}

// trainFile is the optimizer-state file of save id at path.
func trainFile(path, id string) string { return path + "." + id + ".train" }

// shardBase is what zero.ShardPath takes for the checkpoint at path: its
// file id's base, or path itself for a checkpoint saved before file ids.
func shardBase(path string) string {
	if meta, err := readMeta(path); err == nil && meta[fileIDKey] != "" {
		return path + "." + meta[fileIDKey]
	}
	return path
}

// readMeta reads only the metadata of the safetensors file at path.
func readMeta(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, fmt.Errorf("train: %s: reading the header: %w", path, err)
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > 100<<20 {
		return nil, fmt.Errorf("train: %s: header of %d bytes", path, size)
	}
	hdr := make([]byte, size)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return nil, fmt.Errorf("train: %s: reading the header: %w", path, err)
	}
	var h struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(hdr, &h); err != nil {
		return nil, fmt.Errorf("train: %s: header: %w", path, err)
	}
	return h.Meta, nil
}

// staleRE matches, in the directory of a checkpoint whose file name is
// base, its temporary files (group 1 set) and its data files (group 2:
// the file id, empty for files saved before file ids).
func staleRE(base string) *regexp.Regexp {
	q := regexp.QuoteMeta(base)
	return regexp.MustCompile(`^(?:(\.` + q + `(?:\.\d+-[0-9a-f]{16}\.(?:train|rank\d+-of-\d+\.safetensors))?\.tmp\d*)|` +
		q + `\.(?:(\d+-[0-9a-f]{16})\.)?(?:train|rank\d+-of-\d+\.safetensors))$`)
}

// removeStale removes the files of the checkpoint at path that no save
// needs: with tempsOnly, the temporary files a crashed save left (call it
// before a save starts writing); otherwise every data file not of save
// keep (call it once the save of keep has committed). Best effort: a file
// that cannot be removed stays, and the checkpoint is sound either way.
func removeStale(path, keep string, tempsOnly bool) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	re := staleRE(base)
	for _, e := range ents {
		m := re.FindStringSubmatch(e.Name())
		switch {
		case m == nil:
			continue
		case m[1] != "":
			// a temporary file
		case tempsOnly || m[2] == keep:
			continue
		}
		os.Remove(filepath.Join(dir, e.Name()))
	}
}

// shardSaves lists the file ids of the saves at path that have a rank 0
// shard file on disk, newest (highest step) first.
func shardSaves(path string) []string {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, _ := os.ReadDir(dir)
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(base) + `\.((\d+)-[0-9a-f]{16})\.rank0-of-\d+\.safetensors$`)
	type save struct {
		id   string
		step int64
	}
	var saves []save
	for _, e := range ents {
		if m := re.FindStringSubmatch(e.Name()); m != nil {
			st, _ := strconv.ParseInt(m[2], 10, 64)
			saves = append(saves, save{m[1], st})
		}
	}
	sort.SliceStable(saves, func(i, j int) bool { return saves[i].step > saves[j].step })
	ids := make([]string, len(saves))
	for i, s := range saves {
		ids[i] = s.id
	}
	return ids
}
