// The few torch/c10 names DeepSpeed's csrc/adam/cpu_adam_impl.cpp uses, so that it compiles as
// plain C++ without libtorch (bench/deepspeed_adam.sh). Written for zoe, not taken from torch:
// a tensor here is a pointer, an element count and a dtype over memory the caller owns; the
// 16-bit types convert as c10's do (round to nearest even, NaN kept quiet).
#pragma once

// What torch/extension.h brings in that the file relies on.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace c10 {

enum class ScalarType { Float, Half, BFloat16 };

inline const char *toString(ScalarType t) {
    return t == ScalarType::Float ? "Float" : t == ScalarType::Half ? "Half" : "BFloat16";
}

struct BFloat16 {
    uint16_t x;
    BFloat16() = default;
    BFloat16(float f) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            x = 0x7fc0;
        else
            x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    }
    operator float() const {
        uint32_t u = (uint32_t)x << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

struct Half {
    uint16_t x;
    Half() = default;
    Half(float f) {
        _Float16 h = (_Float16)f;
        std::memcpy(&x, &h, 2);
    }
    operator float() const {
        _Float16 h;
        std::memcpy(&h, &x, 2);
        return (float)h;
    }
};

template <typename T> struct CppTypeToScalarType;
template <>
struct CppTypeToScalarType<float> : std::integral_constant<ScalarType, ScalarType::Float> {};
template <>
struct CppTypeToScalarType<Half> : std::integral_constant<ScalarType, ScalarType::Half> {};
template <>
struct CppTypeToScalarType<BFloat16> : std::integral_constant<ScalarType, ScalarType::BFloat16> {};

} // namespace c10

namespace torch {

constexpr c10::ScalarType kFloat32 = c10::ScalarType::Float;
constexpr c10::ScalarType kFloat16 = c10::ScalarType::Half;
constexpr c10::ScalarType kBFloat16 = c10::ScalarType::BFloat16;

struct TensorOptions {
    c10::ScalarType type;
    c10::ScalarType dtype() const { return type; }
};

class Tensor {
  public:
    Tensor() = default;
    Tensor(void *data, int64_t numel, c10::ScalarType type)
        : data_(data), numel_(numel), type_(type) {}
    void *data_ptr() const { return data_; }
    template <typename T> T *data_ptr() const { return static_cast<T *>(data_); }
    int64_t numel() const { return numel_; }
    c10::ScalarType scalar_type() const { return type_; }
    TensorOptions options() const { return {type_}; }
    size_t element_size() const { return type_ == c10::ScalarType::Float ? 4 : 2; }
    bool defined() const { return data_ != nullptr; }
    bool is_contiguous() const { return true; }
    Tensor contiguous() const { return *this; }

  private:
    void *data_ = nullptr;
    int64_t numel_ = 0;
    c10::ScalarType type_ = c10::ScalarType::Float;
};

} // namespace torch

namespace at {
inline c10::ScalarType typeMetaToScalarType(c10::ScalarType t) {
    return t;
}
} // namespace at

#define TORCH_CHECK(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) throw std::runtime_error("TORCH_CHECK failed: " #cond);                       \
    } while (0)
