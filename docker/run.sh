#!/bin/bash
# `docker run` lines for npuserve on Ascend hosts, adapted from the
# vllm-ascend GLM-5.3-Flash guide (§4.1): host networking (the DP RPC port
# and the HCCL ports must be reachable between nodes), the davinci
# devices, the driver mounted read-only from the host, shared memory, and
# the model cache. Usage:
#
#   docker/run.sh a2 configs/ascend/a2-node0.sh     # Atlas 800 A2, node 0
#   docker/run.sh a2 configs/ascend/a2-node1.sh     # Atlas 800 A2, node 1
#   docker/run.sh a3 configs/ascend/a3.sh           # Atlas 800 A3
#   docker/run.sh 950dt configs/ascend/950dt.sh     # 950DT
#
# The script runs inside the container (the image ships configs/ under
# /opt/npuserve); set LOCAL_IP, NODE0_IP, NIC_NAME and MODEL as the scripts
# document.
set -euo pipefail

host="${1:?usage: run.sh a2|a3|950dt SCRIPT}"
script="${2:?usage: run.sh a2|a3|950dt SCRIPT}"
IMAGE="${IMAGE:-npuserve:ascend}"
NAME="${NAME:-npuserve}"
CACHE="${CACHE:-/root/.cache}"

case "$host" in
a2 | 950dt) n=8 ;;
a3) n=16 ;;
*)
	echo "run.sh: unknown host kind $host (a2, a3 or 950dt)" >&2
	exit 2
	;;
esac
devices=()
for ((i = 0; i < n; i++)); do
	devices+=(--device "/dev/davinci$i")
done

extra=()
case "$host" in
950dt)
	# The 950DT guide also maps the UB devices and the HCCL root-info file.
	extra+=(--device /dev/ummu --device /dev/uburma
		-v /etc/hccl_rootinfo.json:/etc/hccl_rootinfo.json)
	;;
esac

exec docker run --rm \
	--name "$NAME" \
	--network host \
	--shm-size=16g \
	"${devices[@]}" \
	--device /dev/davinci_manager \
	--device /dev/devmm_svm \
	--device /dev/hisi_hdc \
	"${extra[@]}" \
	-v /usr/local/dcmi:/usr/local/dcmi:ro \
	-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro \
	-v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro \
	-v /etc/ascend_install.info:/etc/ascend_install.info:ro \
	-v /etc/hccn.conf:/etc/hccn.conf:ro \
	-v "$CACHE:$CACHE" \
	-e LOCAL_IP -e NODE0_IP -e NIC_NAME -e MODEL \
	--entrypoint /bin/bash \
	"$IMAGE" "/opt/npuserve/$script"
