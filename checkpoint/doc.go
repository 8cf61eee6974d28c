// Package checkpoint reads and writes safetensors files, the format of
// Hugging Face's safetensors library that PyTorch users load with
// safetensors.torch.load_file.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
//
//	{"<name>": {"dtype": "F32", "shape": [256, 784], "data_offsets": [begin, end]},
//	 ..., "__metadata__": {"key": "value", ...}}
//
// and the data section: each tensor's bytes, little-endian and row-major,
// at [begin, end) relative to the start of the data section.
//
// Write pads the header with spaces so the data section starts 8-byte
// aligned, and lays the tensors out contiguously, largest element size
// first and then by name (what the reference writer does), so each tensor
// is aligned to its element size and the file does not depend on the order
// of the tensors given. Write is atomic: it writes a temporary file in the
// same directory, fsyncs it, renames it over the target and fsyncs the
// directory, so a crash or an error leaves either the old file or the new
// one, never a mix.
//
// Write and Encode record a CRC-32 of the data section in the metadata
// (ChecksumKey, 8 hex digits: Python's zlib.crc32 of the bytes after the
// header), so that a file damaged after it was written (a disk, copy or
// transfer error) is refused at Read instead of loading wrong numbers;
// files without it read as before, and PyTorch's and safetensors' loaders
// see one more metadata string.
//
// Read and ReadFrom are strict and bounded: the header is at most 100 MiB
// and must fit in the file, must be one JSON object with no duplicate keys,
// every entry needs a known dtype, non-negative dims and data_offsets whose
// length matches the shape, and the tensors must tile the data section
// exactly (no overlap, no gap, no trailing bytes; the reference reader
// rejects the same files). Memory allocated is bounded by the file size.
// Errors wrap ErrCorrupt (a malformed file) or ErrInvalidArgument (a bad
// argument to Write or a conversion) and name the file and the tensor.
package checkpoint
