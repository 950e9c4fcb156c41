// A tiny etcd binary: the server module has replace directives of its own,
// so it cannot be `go install`ed; importing etcdmain from a wrapper works.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
