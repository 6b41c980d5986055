package nodetest

// nriSocket is the runtime's NRI socket in the node's private /run, where
// the sluice chart's NRI trigger (hostPath /var/run/nri) finds it.
const nriSocket = "/run/nri/nri.sock"

// nriConfig turns on containerd 2.x's NRI, as its default does, with the
// plugin dirs in the cluster's dir instead of the machine's /opt/nri and
// /etc/nri. No plugin connects unless a test installs one (sluice with
// trigger=nri), and no validator is set: a node without an NRI plugin runs
// pods as it would with NRI off.
const nriConfig = `
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %q
  plugin_path = %q
  plugin_config_path = %q
`
