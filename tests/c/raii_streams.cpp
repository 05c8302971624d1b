// C++ over the ACL C API in the style of the C++ Ascend samples and inference servers:
// RAII owners for the ACL session, the device, device memory and streams (a
// std::vector of streams), move-only, released in reverse order by their destructors;
// errors become exceptions carrying aclGetRecentErrMsg(). tests/test_shim_programs.py
// compiles it with c++ -std=c++17 and runs it.
//
// Output: "ok <step>" lines, then "done"; a failure prints "FAIL ..." and exits with 1.
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "acl/acl.h"

namespace {

void Check(aclError ret, const char *what)
{
    if (ret != ACL_SUCCESS) {
        const char *recent = aclGetRecentErrMsg();
        throw std::runtime_error(std::string(what) + " returned " + std::to_string(ret) +
                                 ": " + (recent != nullptr ? recent : "(no message)"));
    }
}

class AclSession {
public:
    AclSession() { Check(aclInit(nullptr), "aclInit"); }
    ~AclSession() { (void)aclFinalize(); }
    AclSession(const AclSession &) = delete;
    AclSession &operator=(const AclSession &) = delete;
};

class DeviceGuard {
public:
    explicit DeviceGuard(int32_t id) : id_(id) { Check(aclrtSetDevice(id_), "aclrtSetDevice"); }
    ~DeviceGuard() { (void)aclrtResetDevice(id_); }
    DeviceGuard(const DeviceGuard &) = delete;
    DeviceGuard &operator=(const DeviceGuard &) = delete;

private:
    int32_t id_;
};

struct DeviceFree {
    void operator()(void *ptr) const noexcept
    {
        if (ptr != nullptr && aclrtFree(ptr) != ACL_SUCCESS)
            std::fprintf(stderr, "aclrtFree failed in a destructor\n");
    }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;

DevicePtr DeviceAlloc(size_t size)
{
    void *ptr = nullptr;
    Check(aclrtMalloc(&ptr, size, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    return DevicePtr(ptr);
}

class Stream {
public:
    Stream() { Check(aclrtCreateStream(&stream_), "aclrtCreateStream"); }
    ~Stream()
    {
        if (stream_ != nullptr)
            (void)aclrtDestroyStream(stream_);
    }
    Stream(Stream &&other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
    Stream &operator=(Stream &&other) noexcept
    {
        std::swap(stream_, other.stream_);
        return *this;
    }
    Stream(const Stream &) = delete;
    Stream &operator=(const Stream &) = delete;
    aclrtStream get() const { return stream_; }

private:
    aclrtStream stream_ = nullptr;
};

int Run()
{
    constexpr size_t kSize = 4096;
    constexpr int kStreams = 4;
    AclSession session;
    DeviceGuard device(0);
    std::vector<Stream> streams;
    streams.reserve(1);  // grows past it: moves must keep every stream alive
    for (int i = 0; i < kStreams; ++i)
        streams.emplace_back();
    std::printf("ok %d streams\n", kStreams);

    std::vector<DevicePtr> buffers;
    std::vector<std::vector<unsigned char>> hostIn(kStreams, std::vector<unsigned char>(kSize));
    std::vector<std::vector<unsigned char>> hostOut(kStreams, std::vector<unsigned char>(kSize));
    for (int i = 0; i < kStreams; ++i) {
        buffers.push_back(DeviceAlloc(kSize));
        for (size_t j = 0; j < kSize; ++j)
            hostIn[i][j] = static_cast<unsigned char>(i * 17 + j);
        Check(aclrtMemcpyAsync(buffers[i].get(), kSize, hostIn[i].data(), kSize,
                               ACL_MEMCPY_HOST_TO_DEVICE, streams[i].get()),
              "aclrtMemcpyAsync h2d");
        Check(aclrtMemcpyAsync(hostOut[i].data(), kSize, buffers[i].get(), kSize,
                               ACL_MEMCPY_DEVICE_TO_HOST, streams[i].get()),
              "aclrtMemcpyAsync d2h");
    }
    for (const Stream &stream : streams)
        Check(aclrtSynchronizeStream(stream.get()), "aclrtSynchronizeStream");
    for (int i = 0; i < kStreams; ++i) {
        if (hostIn[i] != hostOut[i])
            throw std::runtime_error("stream " + std::to_string(i) + ": bytes differ");
    }
    std::printf("ok round trips\n");

    // An error becomes an exception whose text is the shim's recent error message.
    try {
        DevicePtr tooBig = DeviceAlloc(size_t{1} << 40);
        std::printf("FAIL 1 TiB allocation succeeded\n");
        return 1;
    } catch (const std::runtime_error &error) {
        if (std::strstr(error.what(), "207001") == nullptr) {
            std::printf("FAIL exception text: %s\n", error.what());
            return 1;
        }
        std::printf("ok exception %s\n", error.what());
    }
    return 0;  // buffers, streams, device and session released here, in reverse order
}

}  // namespace

int main()
{
    try {
        if (Run() != 0)
            return 1;
    } catch (const std::exception &error) {
        std::printf("FAIL %s\n", error.what());
        return 1;
    }
    // Everything was released by the destructors: finalizing again says so.
    if (aclFinalize() != ACL_ERROR_REPEAT_FINALIZE) {
        std::printf("FAIL the session was not finalized by its destructor\n");
        return 1;
    }
    std::printf("done\n");
    return 0;
}
