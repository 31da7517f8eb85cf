/**
 * Copyright (c) 2019-present, Facebook, Inc.
 * All rights reserved.
 *
 * This source code is licensed under the BSD-style license found in the
 * LICENSE file in the root directory of this source tree.
 */

// rankd note: a verbatim copy (comments trimmed) of gloo/common/memory.h from
// upstream Gloo. Debian's libgloo-dev installs gloo/transport/tcp/*.h, which
// include this header, but does not ship it. Only the rankd Gloo backend's
// abort path includes the tcp headers (dataplane/gloo/gloo_abort.cc).

#pragma once

#include <memory>
#include <thread>

namespace gloo {

template <typename T>
class WeakNonOwningPtr;
template <typename T>
class ShareableNonOwningPtr;

// Constructed from a WeakNonOwningPtr iff the object is still alive; blocks
// the object's destruction while it exists.
template <typename T>
class NonOwningPtr final {
 public:
  NonOwningPtr() {}

  explicit NonOwningPtr(const WeakNonOwningPtr<T>& ptr)
      : ptr_(ptr.ptr_.lock()) {}

  T* operator->() const noexcept {
    return ptr_.get();
  }

  explicit operator bool() const noexcept {
    return (bool)ptr_;
  }

 private:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr final {
 public:
  WeakNonOwningPtr() {}

  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& ref)
      : ptr_(ref.ptr_) {}

  explicit operator bool() const noexcept {
    return ptr_.owner_before(std::weak_ptr<T>{}) ||
        std::weak_ptr<T>{}.owner_before(ptr_);
  }

 protected:
  std::weak_ptr<T> ptr_;

  friend class NonOwningPtr<T>;
};

// The root reference to `this`; its destructor waits until every
// NonOwningPtr is gone.
template <typename T>
class ShareableNonOwningPtr final {
 public:
  explicit ShareableNonOwningPtr(T* t) : ptr_(t, [](void* ptr) {}) {}

  ShareableNonOwningPtr(const ShareableNonOwningPtr&) = delete;
  ShareableNonOwningPtr& operator=(ShareableNonOwningPtr const&) = delete;

  ~ShareableNonOwningPtr() {
    auto weak = std::weak_ptr<T>(ptr_);
    ptr_.reset();
    while (!weak.expired()) {
      std::this_thread::yield();
    }
  }

 protected:
  std::shared_ptr<T> ptr_;

  friend class WeakNonOwningPtr<T>;
};

} // namespace gloo
