// The store's exceptions (c10d_store/errors.h).
#include "c10d_store/errors.h"

#include <string>
#include <utility>

namespace rankd::c10d_store {

StoreError::StoreError(absl::Status status)
    : c10::Error(std::string(status.message()), /*backtrace=*/""),
      status_(std::move(status)) {}

}  // namespace rankd::c10d_store
