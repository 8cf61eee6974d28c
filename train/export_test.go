package train

// What the external tests (package train_test) reach inside the package.

var (
	TestHookSave   = &testHookSave
	TestHookUpdate = &testHookUpdate
	FreeBytes      = &freeBytes
	DiskFree       = diskFree
	KeptSaves      = keptSaves
	KeptPath       = keptPath
	FirstNonFinite = firstNonFinite
	SameShape      = sameShape
)

// FileIDKey is the model file's metadata key naming its save's files.
const FileIDKey = fileIDKey
