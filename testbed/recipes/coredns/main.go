// Command coredns is CoreDNS with only the plugins a test cluster's DNS needs
// (cluster.local from the Kubernetes API, health and readiness, a cache), built the
// way CoreDNS documents for a custom plugin set: the plugins are imported here and
// dnsserver.Directives lists them in CoreDNS's own order (plugin.cfg). Leaving out
// the cloud back-ends keeps the build small.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	dnsserver.Directives = []string{
		"reload",
		"ready",
		"health",
		"errors",
		"log",
		"loadbalance",
		"cache",
		"hosts",
		"kubernetes",
		"loop",
		"forward",
	}
}

func main() { coremain.Run() }
