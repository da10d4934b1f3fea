#pragma once
// Launch of merge_attn_states (kernels/common/merge_attn_states.cu), shared by the backends.
#include <cuda_runtime_api.h>

#include "core/dtype.hpp"
#include "kernels/common/merge_params.hpp"

namespace attn {

// merge_attn_states over p.num_partials partial states; out_dtype: the model dtype (fp16/bf16),
// or fp32 for an intermediate that another product consumes (FLASHMLA's o_latent).
void launch_merge_attn_states(const MergeAttnParams& p, DType out_dtype, cudaStream_t stream);

}  // namespace attn
