#!/usr/bin/env perl
# Writes a tiny MNIST-format dataset (plain IDX files, the names gradus train --data-dir expects):
# 28x28 uint8 images of noise with a bright 4x4 block whose position encodes the label, so a model
# can learn it and the loss falls. Usage: make_tiny_mnist.pl DIR N_TRAIN N_TEST [SEED]
use strict;
use warnings;

my ($dir, $n_train, $n_test, $seed) = @ARGV;
die "usage: $0 DIR N_TRAIN N_TEST [SEED]\n" unless defined $n_test;
srand(defined $seed ? $seed : 1);
mkdir $dir unless -d $dir;

sub write_set {
  my ($prefix, $n) = @_;
  open(my $img, '>:raw', "$dir/$prefix-images-idx3-ubyte") or die "$dir: $!";
  open(my $lab, '>:raw', "$dir/$prefix-labels-idx1-ubyte") or die "$dir: $!";
  print $img pack('N4', 0x00000803, $n, 28, 28);
  print $lab pack('N2', 0x00000801, $n);
  for (1 .. $n) {
    my $label = int(rand(10));
    my @px = map { int(rand(96)) } 1 .. 784;
    my ($r0, $c0) = (2 + 8 * int($label / 4), 2 + 6 * ($label % 4));
    for my $r ($r0 .. $r0 + 3) {
      $px[$r * 28 + $_] = 255 for $c0 .. $c0 + 3;
    }
    print $img pack('C*', @px);
    print $lab pack('C', $label);
  }
  close($img) or die;
  close($lab) or die;
}

write_set('train', $n_train);
write_set('t10k', $n_test);
