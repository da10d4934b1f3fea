#include <gtest/gtest.h>
#include "core/dtype.hpp"
TEST(DType, Placeholder) { EXPECT_EQ(attn::dtype_size(attn::DType::bf16), 2u); }
