package main

import (
	"fmt"
	"io"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
)

// loggers are the front ends of one zap core writing JSON lines: slog for
// Baton's own code and zap for the etcd client and the embedded etcd.
type loggers struct {
	log        *slog.Logger
	etcdClient *zap.Logger // warnings and errors
	etcdServer *zap.Logger // errors, until quiet is called
	quiet      func()      // silences the embedded etcd, whose shutdown logs errors
}

func newLoggers(w io.Writer, level string) (loggers, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return loggers{}, usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", level)}
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey, enc.EncodeTime, enc.EncodeDuration = "time", zapcore.RFC3339NanoTimeEncoder, zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	clientCore, err := zapcore.NewIncreaseLevelCore(core, max(lvl, zapcore.WarnLevel))
	if err != nil {
		return loggers{}, err
	}
	serverLevel := zap.NewAtomicLevelAt(max(lvl, zapcore.ErrorLevel))
	serverCore, err := zapcore.NewIncreaseLevelCore(core, serverLevel)
	if err != nil {
		return loggers{}, err
	}
	return loggers{
		log:        slog.New(zapslog.NewHandler(core)),
		etcdClient: zap.New(clientCore).Named("etcd-client"),
		etcdServer: zap.New(serverCore).Named("etcd"),
		quiet:      func() { serverLevel.SetLevel(zapcore.FatalLevel) },
	}, nil
}
