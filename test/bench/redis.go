package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server child on a unix socket, no persistence.
type redisServer struct {
	cmd    *exec.Cmd
	socket string
}

func (r *redisServer) stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
}

// release deletes the key only if it still holds the caller's token.
var release = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// redisContender is SET NX PX + a Lua release, when redis-server is
// installed (make bench-deps).
func (w *world) redisContender() (contender, bool, error) {
	bin, err := exec.LookPath(w.o.redis)
	if err != nil {
		return contender{}, false, nil
	}
	sock := filepath.Join(w.dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = nil, nil // its log says nothing the bench needs
	if err := cmd.Start(); err != nil {
		return contender{}, false, err
	}
	w.redis = &redisServer{cmd: cmd, socket: sock}
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, PoolSize: 128})
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			return contender{}, false, fmt.Errorf("redis-server did not answer on %s", sock)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return contender{name: "Redis SET NX PX", setup: func(ctx context.Context, c int) (func(context.Context, int) error, func(), error) {
		return func(ctx context.Context, i int) error {
			k, tok := fmt.Sprintf("k%d", i), fmt.Sprintf("t%d", i)
			ok, err := rdb.SetNX(ctx, k, tok, time.Minute).Result()
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("redis: %s taken", k)
			}
			return release.Run(context.WithoutCancel(ctx), rdb, []string{k}, tok).Err()
		}, func() {}, nil
	}}, true, nil
}
