// What a copy into another process's buffer costs on one GPU (CUDA IPC), with and without that
// process running GPU work between the copies: the GPU's switch between the two processes'
// contexts. Run it plain, then with an MPS control daemon running (nvidia-cuda-mps-control -d).
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a context_switch_probe.cu -o probe
#include <cuda_runtime.h>
#include <unistd.h>
#include <sys/wait.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
using C = std::chrono::steady_clock;
double us(C::time_point a, C::time_point b) { return std::chrono::duration<double>(b - a).count() * 1e6; }
__global__ void Copy(const uint4* s, uint4* d, size_t per_block) {
  const uint4* a = s + blockIdx.x * per_block; uint4* b = d + blockIdx.x * per_block;
  for (size_t i = threadIdx.x; i < per_block; i += blockDim.x) b[i] = a[i];
}
__global__ void Touch(uint4* d) { if (threadIdx.x == 0) d[blockIdx.x].x += 1; }
const size_t kBytes = 624640;  // 32 blobs of 19,520
int child(int in, int out) {
  cudaSetDevice(0);
  void* buf; cudaMalloc(&buf, 32 << 20);
  cudaIpcMemHandle_t h; cudaIpcGetMemHandle(&h, buf);
  write(out, &h, sizeof(h));
  char c;
  while (read(in, &c, 1) == 1) {
    if (c == 'k') { Touch<<<1, 32>>>(static_cast<uint4*>(buf)); cudaDeviceSynchronize(); }
    write(out, &c, 1);
  }
  return 0;
}
int main() {
  int to_child[2], from_child[2];
  pipe(to_child); pipe(from_child);
  pid_t pid = fork();
  if (pid == 0) { close(to_child[1]); close(from_child[0]); return child(to_child[0], from_child[1]); }
  close(to_child[0]); close(from_child[1]);
  cudaIpcMemHandle_t h; read(from_child[0], &h, sizeof(h));
  cudaSetDevice(0);
  void* remote; if (cudaIpcOpenMemHandle(&remote, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) { printf("open failed\n"); return 1; }
  void *src, *local; cudaMalloc(&src, 32 << 20); cudaMalloc(&local, 32 << 20);
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  auto ping = [&](char c) { write(to_child[1], &c, 1); read(from_child[0], &c, 1); };
  auto run = [&](const char* what, void* dst, bool kernel, char between) {
    std::vector<double> t;
    for (int r = 0; r < 30; ++r) {
      if (between) ping(between);
      auto t0 = C::now();
      if (kernel) Copy<<<32, 256, 0, s>>>(static_cast<uint4*>(src), static_cast<uint4*>(dst), kBytes / 16 / 32);
      else cudaMemcpyAsync(dst, src, kBytes, cudaMemcpyDeviceToDevice, s);
      cudaStreamSynchronize(s);
      t.push_back(us(t0, C::now()));
    }
    std::sort(t.begin(), t.end());
    printf("%-60s p50 %7.1f us  min %7.1f  max %7.1f\n", what, t[t.size() / 2], t[0], t.back());
  };
  run("kernel copy 0.6 MB into own buffer", local, true, 0);
  run("kernel copy 0.6 MB into IPC buffer", remote, true, 0);
  run("cudaMemcpyAsync D2D 0.6 MB into IPC buffer", remote, false, 0);
  run("kernel copy into own buffer, child pinged (no GPU work)", local, true, 'p');
  run("kernel copy into IPC buffer, child pinged (no GPU work)", remote, true, 'p');
  run("kernel copy into own buffer, child ran a kernel before", local, true, 'k');
  run("kernel copy into IPC buffer, child ran a kernel before", remote, true, 'k');
  run("cudaMemcpyAsync into IPC buffer, child ran a kernel before", remote, false, 'k');
  close(to_child[1]);
  waitpid(pid, nullptr, 0);
  return 0;
}
