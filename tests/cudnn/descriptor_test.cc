// Ownership rules of BackendDescriptor (cuDNN creates descriptors without a GPU, so these run in
// CI): every descriptor made is destroyed exactly once, by whoever holds it last.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "cudnn/descriptor.h"

namespace convplan::cudnn_detail {
namespace {

BackendDescriptor make(cudnnBackendDescriptorType_t type = CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
  StatusOr<BackendDescriptor> d = BackendDescriptor::create(type);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return std::move(d).value();
}

TEST(BackendDescriptor, DestructorDestroysTheDescriptor) {
  const int64_t before = live_descriptor_count();
  {
    BackendDescriptor d = make();
    EXPECT_TRUE(static_cast<bool>(d));
    EXPECT_EQ(live_descriptor_count(), before + 1);
  }
  EXPECT_EQ(live_descriptor_count(), before);
}

TEST(BackendDescriptor, MoveConstructionTransfersOwnership) {
  const int64_t before = live_descriptor_count();
  BackendDescriptor a = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnBackendDescriptor_t raw = a.get();
  BackendDescriptor b(std::move(a));
  EXPECT_EQ(b.get(), raw);
  EXPECT_EQ(b.type(), CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  EXPECT_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(live_descriptor_count(), before + 1);
}

TEST(BackendDescriptor, MoveAssignmentDestroysWhatItHeldFirst) {
  const int64_t before = live_descriptor_count();
  BackendDescriptor a = make();
  BackendDescriptor b = make();
  EXPECT_EQ(live_descriptor_count(), before + 2);
  const cudnnBackendDescriptor_t raw_b = b.get();
  a = std::move(b);
  EXPECT_EQ(live_descriptor_count(), before + 1);  // a's old descriptor is gone, not leaked
  EXPECT_EQ(a.get(), raw_b);
  EXPECT_FALSE(static_cast<bool>(b));  // NOLINT(bugprone-use-after-move)
}

TEST(BackendDescriptor, SelfMoveAssignmentKeepsTheDescriptor) {
  const int64_t before = live_descriptor_count();
  BackendDescriptor a = make();
  const cudnnBackendDescriptor_t raw = a.get();
  BackendDescriptor& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.get(), raw);
  EXPECT_EQ(live_descriptor_count(), before + 1);
}

TEST(BackendDescriptor, ResetDestroysOnceAndLeavesItEmpty) {
  const int64_t before = live_descriptor_count();
  BackendDescriptor a = make();
  a.reset();
  EXPECT_FALSE(static_cast<bool>(a));
  EXPECT_EQ(live_descriptor_count(), before);
  a.reset();  // a second reset is a no-op
  EXPECT_EQ(live_descriptor_count(), before);
}

TEST(BackendDescriptor, CreateManyOwnsEachDescriptor) {
  const int64_t before = live_descriptor_count();
  {
    StatusOr<std::vector<BackendDescriptor>> many =
        BackendDescriptor::create_many(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, 5);
    ASSERT_TRUE(many.ok()) << many.status().to_string();
    EXPECT_EQ(many->size(), 5u);
    EXPECT_EQ(live_descriptor_count(), before + 5);
  }
  EXPECT_EQ(live_descriptor_count(), before);
}

TEST(BackendDescriptor, AttributesRoundTripAndFinalizeTwiceIsRefused) {
  BackendDescriptor d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {2, 3, 4, 5}, strides[4] = {60, 20, 5, 1};
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  ASSERT_EQ(d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(d.set_int64s(CUDNN_ATTR_TENSOR_DIMENSIONS, dims), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(d.set_int64s(CUDNN_ATTR_TENSOR_STRIDES, strides), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(d.set_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, 42), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(d.set_int64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 16), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(d.finalize(), CUDNN_STATUS_SUCCESS);
  int64_t uid = 0;
  EXPECT_EQ(d.get_int64(CUDNN_ATTR_TENSOR_UNIQUE_ID, &uid), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(uid, 42);
  int64_t count = 0;
  EXPECT_EQ(d.get_count(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, &count),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(count, 4);
  EXPECT_NE(d.finalize(), CUDNN_STATUS_SUCCESS);
}

}  // namespace
}  // namespace convplan::cudnn_detail
