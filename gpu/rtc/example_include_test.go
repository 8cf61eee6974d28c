package rtc_test

import (
	"fmt"

	"github.com/gdist/gdist/gpu/rtc"
)

// Which CUDA include directories every compilation gets (so that a
// kernel can #include <mma.h>, <cuda_fp16.h> or <cuda_bf16.h>), and why
// none or what is odd about them: $GDIST_CUDA_INCLUDE names them where
// the search beside NVRTC finds the wrong ones. Not run: the answer is
// the machine's.
func ExampleCompiler_Include() {
	c, err := rtc.DefaultCompiler()
	if err != nil {
		fmt.Println("no NVRTC:", err)
		return
	}
	dirs, note := c.Include()
	if dirs == nil {
		fmt.Printf("no CUDA include directory (%s): set $%s\n", note, rtc.EnvInclude)
		return
	}
	fmt.Println("NVRTC's include path:", dirs, note)
}
