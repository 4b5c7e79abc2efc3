#include <gtest/gtest.h>

#include "hopattn/hopattn.hpp"

TEST(Smoke, MakeTensorIsContiguous) {
  float buf[2 * 3 * 4];
  hopattn::Tensor t = hopattn::make_tensor(buf, hopattn::Dtype::kFloat32, {2, 3, 4});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.stride[0], 12);
  EXPECT_EQ(t.stride[2], 1);
  EXPECT_EQ(t.numel(), 24);
}
