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
// With Config.Keep K > 1, the K-1 checkpoints before the latest stay too:
// before a save, the model file at <path> gets a second name,
// <path>.<id>.safetensors (keptPath), its data files stay, and after the
// commit the oldest beyond K-1 are removed. Each such file is a checkpoint
// -resume takes like <path>.
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
	"strings"
)

// fileIDKey is the model file's metadata key naming its save's data files.
const fileIDKey = "file_id"

// newSaveID is a fresh save id for a save at step.
func newSaveID(step int64) string {
	return fmt.Sprintf("%d-%016x", step, rand.Uint64())
}

// dataBase is the common prefix of the data files of save id whose model
// file is path: <path>.<id>, or, for a kept older checkpoint's model file
// <base>.<id>.safetensors (Config.Keep), <base>.<id>.
func dataBase(path, id string) string {
	if b, ok := strings.CutSuffix(path, "."+id+".safetensors"); ok {
		return b + "." + id
	}
	return path + "." + id
}

// trainFile is the optimizer-state file of save id at path.
func trainFile(path, id string) string { return dataBase(path, id) + ".train" }

// shardBase is what zero.ShardPath takes for the checkpoint at path: its
// file id's base, or path itself for a checkpoint saved before file ids.
func shardBase(path string) string {
	if meta, err := readMeta(path); err == nil && meta[fileIDKey] != "" {
		return dataBase(path, meta[fileIDKey])
	}
	return path
}

// keptPath is where an older checkpoint, save id, keeps its model file
// once a newer save commits at path (Config.Keep > 1).
func keptPath(path, id string) string { return path + "." + id + ".safetensors" }

// keptSaves lists the ids of the older checkpoints kept at path, newest
// (highest step) first.
func keptSaves(path string) []string {
	return savesLike(path, `\.safetensors`)
}

// savesLike lists the ids of the saves at path that have a file named
// <base>.<id><suffix> (suffix a regexp) in its directory, newest (highest
// step) first.
func savesLike(path, suffix string) []string {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, _ := os.ReadDir(dir)
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(base) + `\.((\d+)-[0-9a-f]{16})` + suffix + `$`)
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

// keepCurrent makes the checkpoint committed at path an older kept one
// before a new save replaces it: a hard link to its model file at
// keptPath (its data files stay, as removeStale keeps the files of every
// kept save). Best effort.
func keepCurrent(path string) {
	meta, err := readMeta(path)
	if err != nil || meta[fileIDKey] == "" {
		return
	}
	kp := keptPath(path, meta[fileIDKey])
	if _, err := os.Stat(kp); err == nil {
		return
	}
	os.Link(path, kp)
}

// pruneKept removes the older checkpoints at path beyond the keep-1 newest
// (and one that is the committed checkpoint itself), with their data
// files.
func pruneKept(path string, keep int) {
	cur := ""
	if meta, err := readMeta(path); err == nil {
		cur = meta[fileIDKey]
	}
	n := 0
	for _, id := range keptSaves(path) {
		if id != cur && n < keep-1 {
			n++
			continue
		}
		os.Remove(keptPath(path, id))
	}
	removeStale(path, cur, false)
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
// keep or of an older kept checkpoint (keptSaves; call it once the save
// of keep has committed). Best effort: a file
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
	kept := map[string]bool{}
	for _, id := range keptSaves(path) {
		kept[id] = true
	}
	for _, e := range ents {
		m := re.FindStringSubmatch(e.Name())
		switch {
		case m == nil:
			continue
		case m[1] != "":
			// a temporary file
		case tempsOnly || m[2] == keep || kept[m[2]]:
			continue
		}
		os.Remove(filepath.Join(dir, e.Name()))
	}
}

// shardSaves lists the file ids of the saves at path that have a rank 0
// shard file on disk, newest (highest step) first.
func shardSaves(path string) []string {
	return savesLike(path, `\.rank0-of-\d+\.safetensors`)
}
