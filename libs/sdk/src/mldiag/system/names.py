"""The names of the metrics the samplers record, in one place.

The SDK does not depend on ``mldiag_schemas``; these literals equal the constants of
``mldiag_schemas.monitoring`` (a unit test holds them together), which the detectors read.
"""

HOST_CPU = "host_cpu_utilization"
HOST_MEMORY = "host_memory_utilization"
HOST_MEMORY_USED = "host_memory_used_bytes"
PROCESS_RSS = "process_memory_rss_bytes"

HOST_CPU_USER = "host_cpu_user_percent"
HOST_CPU_SYSTEM = "host_cpu_system_percent"
HOST_CPU_IOWAIT = "host_cpu_iowait_percent"
HOST_CPU_STEAL = "host_cpu_steal_percent"
RUN_CPU = "run_cpu_utilization"
RUN_MEMORY = "run_memory_rss_bytes"
HOST_LOAD = "host_load_per_cpu"
HOST_CPU_COUNT = "host_cpu_count"
HOST_SWAP = "host_swap_utilization"
HOST_SWAP_IO = "host_swap_io_bytes_per_second"
DISK_BUSY = "host_disk_busy_percent"
DISK_READ = "host_disk_read_bytes_per_second"
DISK_WRITE = "host_disk_write_bytes_per_second"
NETWORK_RECEIVE = "host_network_receive_bytes_per_second"
NETWORK_TRANSMIT = "host_network_transmit_bytes_per_second"
TOP_PROCESS_CPU = "host_top_process_cpu_percent"
TOP_PROCESS_MEMORY = "host_top_process_memory_percent"
PROCESS_LABEL = "process"
PID_LABEL = "pid"

GPU_THROTTLED = "gpu_throttled"
GPU_ECC_ERRORS = "gpu_ecc_uncorrected_errors"
GPU_XID = "gpu_xid_error"
GPU_THROTTLE_REASONS = "gpu_throttle_reasons"
GPU_PCIE_RX = "gpu_pcie_rx_bytes_per_second"
GPU_PCIE_TX = "gpu_pcie_tx_bytes_per_second"
