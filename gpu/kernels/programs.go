package kernels

import (
	"maps"
	"slices"
)

// The kernels of the layers' programs that Load looks up.
var (
	pointwiseKernels = []string{"gd_bn_finalize", "gd_bn_norm", "gd_bn_norm32", "gd_bn_param_grads", "gd_bn_dx", "gd_bn_dx32",
		"gd_gelu", "gd_gelu_backward",
		"gd_embed", "gd_embed4", "gd_pos_backward", "gd_heads", "gd_heads4",
		"gd_adam", "gd_adam4", "gd_scale_by", "gd_clip_square", "gd_clip_global", "gd_dropout", "gd_add", "gd_add4",
		"gd_tanh", "gd_tanh_backward", "gd_add_rows",
		"gd_bias_gelu", "gd_bias_gelu4", "gd_bias_residual", "gd_bias_residual4"}
	rowsKernels = append([]string{"gd_row_partial", "gd_bn_partial", "gd_bn_finish", "gd_bn_grad_partial", "gd_bn_grad_finish", "gd_layernorm", "gd_layernorm_backward",
		"gd_causal_softmax", "gd_causal_softmax_backward",
		"gd_sumsq", "gd_clip_finish", "gd_col_partial", "gd_col_finish", "gd_embed_hist", "gd_embed_scan", "gd_embed_scatter", "gd_embed_rows", "gd_gelu_bias_backward", "gd_col_finish_w",
		"gd_layernorm_backward_cols_r2", "gd_layernorm_backward_cols_r4", "gd_layernorm_backward_cols_r8",
		"gd_layernorm_backward_cols_r16", "gd_layernorm_backward_cols_r24", "gd_layernorm_backward_cols_r32"}, regKernels()...)
)

// regKernels are the row kernels' instantiations with rows in registers
// (regWidths): name_rK for each width K.
func regKernels() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(regNames)) {
		out = append(out, regNames[name]...)
	}
	return out
}
