package main

import "github.com/spf13/pflag"

// daprOptions configure the Dapr lock API of `baton serve`: off unless an
// address is given. Every build has the flags; the lean build, which pods
// not speaking Dapr run, has no Dapr API and says so (see dapr_off.go).
type daprOptions struct {
	httpAddr, grpcAddr string
	stores             []string
	appID              string
	built              daprBuilt // what validate made of them
}

func (o *daprOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.httpAddr, "dapr-http-addr", "", "serve Dapr's lock API over HTTP here, as daprd: 127.0.0.1:3500 (the SDKs' default), or unix:///PATH; empty: off")
	fs.StringVar(&o.grpcAddr, "dapr-grpc-addr", "", "serve Dapr's lock API over gRPC here, as daprd: 127.0.0.1:50001 (the SDKs' default), or unix:///PATH; empty: off")
	fs.StringArrayVar(&o.stores, "dapr-store", nil, "a Dapr lock store, name=NAME[,prefix=KEY-PREFIX][,keyPrefix=appid|name|none|CUSTOM]; repeat for more (default: name=lockstore,prefix=dapr,keyPrefix=appid)")
	fs.StringVar(&o.appID, "dapr-app-id", "", "the app's Dapr app id: the key scoping of stores with keyPrefix appid (the injector sets it from the pod's dapr.io/app-id or baton.dev/dapr-app-id annotation)")
}

// enabled says whether the Dapr API is to be served.
func (o *daprOptions) enabled() bool { return o.httpAddr != "" || o.grpcAddr != "" }

// given says whether any Dapr flag is set.
func (o *daprOptions) given() bool { return o.enabled() || len(o.stores) > 0 || o.appID != "" }
